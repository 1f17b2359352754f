# CTest (cmake -P): the demos given damaged files they read back. A tiny
# seq2seq model and a ViT checkpoint are written, then copies with one field
# or tensor damaged (REWRITE: tests/apps/rewrite_safetensors.cpp):
#   seq2seq --eval-only: every metadata number out of range, negative, huge,
#     not a number, with trailing junk ("16abc"), a non-finite or non-numeric
#     test_exact_match -> exit 1 and one line naming the field, quickly;
#   vit --resume: an Adam moment missing (one of a pair, or both), a scheduler
#     field stored as float32, a tensor nobody reads, a negative second
#     moment, a NaN first moment, a step count of NaN, -5, 1e300 or 2.5, a
#     negative lr or weight decay -> exit 1, one line naming the entry;
#   vit --ema D --resume -> refused (the average is not in the checkpoint);
#   NaN in the model's weights -> on --resume a warning naming the tensor,
#     and the run goes on (--check); vit, cnn and seq2seq --eval-only over
#     NaN weights -> refused naming the tensor, and with --force-eval the
#     warning, then exit 1 on the non-finite test loss;
#   a FIFO as --weights / --resume -> exit 1 at once (no hang);
#   seq2seq --beam 3 --force-eval over NaN weights -> the warning, and the run ends;
#   vit --teacher T: T with NaN weights or a negative BatchNorm running
#     variance -> exit 1 naming T and the tensor; a distilled run resumed
#     after its teacher file changed -> exit 2 naming both fingerprints;
#   cnn on test images of another size than its training images -> exit 1;
#   gpt --eval-only: metadata JSON nested 100,000 deep -> exit 1, one line;
#   gpt's stored configuration: every number with the values its flag
#     refuses, and absurd sizes, on --resume, --eval-only and --generate ->
#     exit 1 naming the file, the field and the flag's range; the stored
#     iteration and generator offsets; a GPT-2 checkpoint's model entry;
#   gpt --eval-only / --generate on NaN or overflowing weights -> refused
#     by name; with --force-eval a warning, then exit 1 on a NaN loss.
# Variables: SEQ2SEQ, VIT, CNN, GPT, MAKE_DATA, REWRITE, TOKENIZER, OUT.
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
include("${CMAKE_CURRENT_LIST_DIR}/expect.cmake")  # expect, expect_warned, rewrite
execute_process(COMMAND mkfifo "${OUT}/fifo")

# ---- seq2seq -----------------------------------------------------------
execute_process(COMMAND "${SEQ2SEQ}" --epochs 1 --train-size 64 --test-size 16 --hidden 8 --heatmaps 0 --quiet
                        --threads 1 --out "${OUT}/s2s" RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "seq2seq (tiny run) exited with ${rc}")
endif()
set(model "${OUT}/s2s/model.safetensors")
set(k 0)
foreach(edit "train_size=-1" "train_size=1000000000" "test_size=0" "test_size=-1" "test_size=1000000000"
             "train_size=16abc" "embed_size=1000000000" "num_hiddens=1000000000" "num_hiddens=7" "embed_size="
             "seed=-1" "seed=abc" "test_exact_match=abc" "test_exact_match=nan" "test_exact_match=2"
             "embed_size=64")
  math(EXPR k "${k} + 1")
  string(REGEX REPLACE "=.*" "" field "${edit}")
  rewrite("${model}" "${OUT}/s2s_${k}.safetensors" "meta:${edit}")
  expect("seq2seq --eval-only with ${edit}" 1 "${field}" "${SEQ2SEQ}" --eval-only --weights "${OUT}/s2s_${k}.safetensors"
         --out "${OUT}/s2s_eval" --quiet)
endforeach()
rewrite("${model}" "${OUT}/s2s_nan.safetensors" "nan:decoder.dense.weight")
expect("seq2seq --eval-only on NaN weights" 1
       "s2s_nan.safetensors: tensor decoder.dense.weight \\(NaN or Inf\\); refusing to evaluate it \\(--force-eval"
       "${SEQ2SEQ}" --eval-only --weights "${OUT}/s2s_nan.safetensors" --out "${OUT}/s2s_eval" --quiet --check)
expect("seq2seq --eval-only --force-eval on NaN weights" 0 "warning: .*decoder.dense.weight \\(NaN or Inf\\)"
       "${SEQ2SEQ}" --eval-only --force-eval --weights "${OUT}/s2s_nan.safetensors" --out "${OUT}/s2s_eval" --quiet
       --check)
# Beam search over NaN log-probabilities (once a SIGSEGV): NaN ranks last, the
# run ends, and the NaN test loss is an error rather than a score.
expect_warned("seq2seq --eval-only --beam 3 on NaN weights" 1 "warning: .*decoder.dense.weight \\(NaN or Inf\\)"
              "test loss of .*s2s_nan.safetensors is NaN" "${SEQ2SEQ}" --eval-only --force-eval --beam 3
              --weights "${OUT}/s2s_nan.safetensors" --out "${OUT}/s2s_eval_beam" --quiet)
expect("seq2seq --eval-only --weights FIFO" 1 "FIFO" "${SEQ2SEQ}" --eval-only --weights "${OUT}/fifo" --out "${OUT}/s2s_eval")

# ---- vit --resume --------------------------------------------------------
execute_process(COMMAND "${MAKE_DATA}" "${OUT}/data" RESULT_VARIABLE rc)
set(tiny --data-dir "${OUT}/data" --epochs 2 --stop-after 1 --batch-size 32 --width 16 --depth 1 --heads 2 --mlp 16
         --threads 1 --quiet --limit-train 64 --limit-test 32)
execute_process(COMMAND "${VIT}" ${tiny} --out "${OUT}/vit" RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "vit (tiny run) exited with ${rc}")
endif()
set(ckpt "${OUT}/vit/checkpoint.safetensors")
expect("vit --resume of an intact checkpoint" 0 "^$" "${VIT}" --resume "${ckpt}" --out "${OUT}/vit_r" --check)
set(moment optimizer.state.0.0)
set(cases "drop:${moment}.exp_avg_sq|must both be present"
          "drop:${moment}.exp_avg,drop:${moment}.exp_avg_sq|Adam moments for"
          "f32:scheduler.last_epoch|scheduler state"
          "f32:optimizer.step|optimizer state"
          "neg:${moment}.exp_avg_sq|vit_5.safetensors': optimizer state: optimizer load_state_dict: 'state.0.0.exp_avg_sq' holds a negative value"
          "nan:${moment}.exp_avg|'state.0.0.exp_avg' holds NaN or Inf"
          "set:optimizer.step=nan|'step' = nan \\(expected a whole number"
          "set:optimizer.step=-5|'step' = -5 "
          "set:optimizer.step=1e300|'step' = 1e\\+300 "
          "set:optimizer.step=2.5|'step' = 2.5 "
          "set:optimizer.param_groups.0.weight_decay=-1e6|'param_groups.0.weight_decay' = -1e\\+06 "
          "set:optimizer.param_groups.0.lr=-1|'param_groups.0.lr' = -1 ")
set(k 0)
foreach(c IN LISTS cases)
  math(EXPR k "${k} + 1")
  string(REPLACE "|" ";" parts "${c}")  # edits, comma-separated, then the expected message
  string(REPLACE "," ";" parts "${parts}")
  list(GET parts -1 pattern)
  list(REMOVE_AT parts -1)
  rewrite("${ckpt}" "${OUT}/vit_${k}.safetensors" ${parts})
  expect("vit --resume with ${parts}" 1 "${pattern}" "${VIT}" --resume "${OUT}/vit_${k}.safetensors" --out "${OUT}/vit_r")
endforeach()
rewrite("${ckpt}" "${OUT}/vit_nan.safetensors" "nan:model.head.weight")
expect("vit --resume with NaN weights" 0 "warning: .*model.head.weight \\(NaN or Inf\\)"
       "${VIT}" --resume "${OUT}/vit_nan.safetensors" --out "${OUT}/vit_r" --check)
expect("vit --eval-only on NaN weights" 1 "vit_nan.safetensors: tensor model.head.weight \\(NaN or Inf\\); refusing"
       "${VIT}" --eval-only --weights "${OUT}/vit_nan.safetensors" --data-dir "${OUT}/data" --out "${OUT}/vit_e")
expect_warned("vit --eval-only --force-eval on NaN weights" 1 "warning: .*model.head.weight \\(NaN or Inf\\)"
              "test loss of .*vit_nan.safetensors is NaN" "${VIT}" --eval-only --force-eval --weights "${OUT}/vit_nan.safetensors"
              --data-dir "${OUT}/data" --out "${OUT}/vit_e" --threads 1 --quiet)
expect("vit --ema with --resume" 2 "--ema does not resume" "${VIT}" --ema 0.9 --resume "${ckpt}" --out "${OUT}/vit_r")
expect("vit --resume FIFO" 1 "FIFO" "${VIT}" --resume "${OUT}/fifo" --out "${OUT}/vit_r")

# ---- vit --teacher, cnn ----------------------------------------------------
execute_process(COMMAND "${CNN}" --data-dir "${OUT}/data" --epochs 1 --widths 4 --blocks 1 --batch-size 32 --limit-train 64
                        --limit-test 32 --threads 1 --quiet --out "${OUT}/teacher" RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cnn (tiny teacher) exited with ${rc}")
endif()
set(teacher "${OUT}/teacher/model.safetensors")
rewrite("${teacher}" "${OUT}/teacher_nan.safetensors" "nan:fc.weight")
rewrite("${teacher}" "${OUT}/teacher_negvar.safetensors" "neg:bn1.running_var")
rewrite("${teacher}" "${OUT}/teacher_huge.safetensors" "set:fc.weight=3e38")
foreach(c "nan|fc.weight \\(NaN or Inf\\)" "negvar|bn1.running_var \\(negative running variance\\)"
          "huge|fc.weight \\(values up to 3e\\+38")
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 kind)
  list(GET parts 1 pattern)
  expect("vit --teacher with ${kind}" 1 "--teacher .*teacher_${kind}.safetensors: tensor ${pattern}" "${VIT}" ${tiny}
         --distill hard --teacher "${OUT}/teacher_${kind}.safetensors" --out "${OUT}/vit_t")
endforeach()
# cnn --eval-only of those files: refused by name, or with --force-eval a warning and exit 1 on the NaN loss.
expect("cnn --eval-only on NaN weights" 1 "teacher_nan.safetensors: tensor fc.weight \\(NaN or Inf\\); refusing to evaluate"
       "${CNN}" --eval-only --weights "${OUT}/teacher_nan.safetensors" --data-dir "${OUT}/data" --out "${OUT}/cnn_e")
expect_warned("cnn --eval-only --force-eval on NaN weights" 1 "warning: .*fc.weight \\(NaN or Inf\\)"
              "test loss of .*teacher_nan.safetensors is NaN" "${CNN}" --eval-only --force-eval
              --weights "${OUT}/teacher_nan.safetensors" --data-dir "${OUT}/data" --out "${OUT}/cnn_e" --limit-test 32
              --threads 1 --quiet)
# A distilled run stopped after an epoch resumes with its teacher, not with another file.
file(COPY_FILE "${teacher}" "${OUT}/teacher_copy.safetensors")
execute_process(COMMAND "${VIT}" ${tiny} --distill hard --teacher "${OUT}/teacher_copy.safetensors" --out "${OUT}/vit_d"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "vit (tiny distilled run) exited with ${rc}")
endif()
expect("vit --resume of a distilled run, same teacher" 0 "^$" "${VIT}" --resume "${OUT}/vit_d/checkpoint.safetensors"
       --out "${OUT}/vit_dr" --check)
rewrite("${teacher}" "${OUT}/teacher_copy.safetensors" "set:fc.bias=0.5")
expect("vit --resume of a distilled run, teacher changed" 2
       "--teacher .*teacher_copy.safetensors changed since .*checkpoint.safetensors was written: the file is now [0-9]+ bytes, fnv1a64 [0-9a-f]+, the checkpoint recorded [0-9]+ bytes, fnv1a64 [0-9a-f]+"
       "${VIT}" --resume "${OUT}/vit_d/checkpoint.safetensors" --out "${OUT}/vit_dr")
execute_process(COMMAND "${MAKE_DATA}" "${OUT}/data_mixed" 32 RESULT_VARIABLE rc)
expect("cnn with 32x32 test images and 28x28 training images" 1 "test images are 1x32x32 but the training images are 1x28x28"
       "${CNN}" --data-dir "${OUT}/data_mixed" --epochs 1 --widths 4 --blocks 1 --batch-size 32 --limit-train 64 --limit-test 32
       --threads 1 --quiet --out "${OUT}/cnn_mixed")

# ---- gpt --eval-only -----------------------------------------------------
set(text "")
foreach(i RANGE 1 30)
  string(APPEND text "line ${i}: the quick brown fox jumps over the lazy dog.\n")
endforeach()
file(WRITE "${OUT}/corpus.txt" "${text}")
execute_process(COMMAND "${GPT}" --data "${OUT}/corpus.txt" --layers 1 --heads 2 --width 8 --context 16 --batch-size 2
                        --iters 2 --eval-interval 2 --eval-iters 1 --sample-tokens 4 --threads 1 --quiet
                        --out "${OUT}/gpt" RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpt (tiny run) exited with ${rc}")
endif()
# Metadata JSON nested 100,000 deep (once a SIGSEGV: a stack overflow) is refused by name.
rewrite("${OUT}/gpt/model.safetensors" "${OUT}/gpt_deep.safetensors" "deep:final_val_loss=100000")
expect("gpt --eval-only with final_val_loss nested 100,000 deep" 1
       "gpt_deep.safetensors: metadata 'final_val_loss' is JSON nested more than 64 deep" "${GPT}" --eval-only
       --weights "${OUT}/gpt_deep.safetensors" --data "${OUT}/corpus.txt" --out "${OUT}/gpt_eval" --threads 1)
rewrite("${OUT}/gpt/model.safetensors" "${OUT}/gpt_deep_config.safetensors" "deep:config=100000")
expect("gpt --eval-only with config nested 100,000 deep" 1 "metadata 'config' is JSON nested more than 64 deep"
       "${GPT}" --eval-only --weights "${OUT}/gpt_deep_config.safetensors" --data "${OUT}/corpus.txt"
       --out "${OUT}/gpt_eval" --threads 1)

# The stored configuration goes through the flags' validators: every number
# of it with the values the flags refuse, and absurd sizes and counts, on
# --resume (a checkpoint stopped half-way), --eval-only and --generate; exit 1
# and one line naming the file, the field and the flag's range, quickly.
execute_process(COMMAND "${GPT}" --data "${OUT}/corpus.txt" --layers 1 --heads 2 --width 8 --context 16 --batch-size 2
                        --iters 4 --eval-interval 2 --eval-iters 1 --sample-tokens 4 --threads 1 --quiet --stop-after 2
                        --out "${OUT}/gpt_stop" RESULT_VARIABLE rc OUTPUT_QUIET)
set(gck "${OUT}/gpt_stop/checkpoint.safetensors")
execute_process(COMMAND "${GPT}" --resume "${gck}" --out "${OUT}/gpt_r" --check RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpt --resume of an intact checkpoint exited with ${rc}")
endif()
set(k 0)
function(gpt_config_case what pattern)  # ARGN: field value pairs, then RUN and the arguments (FILE: the copy)
  list(FIND ARGN RUN r)
  list(SUBLIST ARGN 0 ${r} edits)
  math(EXPR r "${r} + 1")
  list(SUBLIST ARGN ${r} -1 run)
  set(args "")
  while(edits)
    list(POP_FRONT edits field value)
    list(APPEND args "json:config.${field}=${value}")
  endwhile()
  math(EXPR n "${k} + 1")
  set(k ${n} PARENT_SCOPE)
  rewrite("${gck}" "${OUT}/gpt_c${n}.safetensors" ${args})
  string(REPLACE "FILE" "${OUT}/gpt_c${n}.safetensors" run "${run}")
  expect("gpt ${what}" 1 "gpt_c${n}.safetensors: stored configuration: ${pattern}" "${GPT}" ${run} --out "${OUT}/gpt_r"
         --threads 1)
endfunction()
set(ints layers heads width context batch_size iters warmup eval_interval eval_iters sample_tokens top_k)
set(reals lr min_lr weight_decay beta2 clip dropout temperature top_p)
foreach(field ${ints} ${reals} seed)
  foreach(value -1 "\"abc\"" 1e300 null "[1]")
    gpt_config_case("--resume with ${field} = ${value}" "${field}: " ${field} "${value}" RUN --resume FILE)
  endforeach()
  if(NOT field STREQUAL "seed")
    gpt_config_case("--resume with ${field} = 2^63" "${field}: " ${field} 9223372036854775808 RUN --resume FILE)
  endif()
endforeach()
foreach(field ${ints})
  gpt_config_case("--resume with ${field} = 1.5" "${field}: value 1.5 is not an integer" ${field} 1.5 RUN --resume FILE)
endforeach()
gpt_config_case("--generate with layers = 1000000" "layers: value 1000000 is not an integer in \\[1, 64\\] \\(the range of --layers\\)"
                layers 1000000 RUN --generate --weights FILE)
gpt_config_case("--resume with layers = 2^40" "layers: value 1099511627776 is not an integer in \\[1, 64\\]"
                layers 1099511627776 RUN --resume FILE)
gpt_config_case("--eval-only with eval_iters = 1e9" "eval_iters: value 1000000000.0 is not an integer in \\[1, 100000\\]"
                eval_iters 1e9 RUN --eval-only --weights FILE --data "${OUT}/corpus.txt")
gpt_config_case("--resume with eval_iters = 1e9, eval_interval = 1" "eval_iters: value 1000000000.0 is not an integer"
                eval_interval 1 eval_iters 1e9 RUN --resume FILE)
gpt_config_case("--generate with sample_tokens = 1e12" "sample_tokens: value 1000000000000.0 is not an integer in \\[0, 1000000\\]"
                sample_tokens 1e12 RUN --generate --weights FILE)
gpt_config_case("--resume with lr = 0" "lr: value 0 is not a number in \\[1e-12, 10\\] \\(the range of --lr\\)" lr 0
                RUN --resume FILE)
gpt_config_case("--resume with min_lr = -1" "min_lr: value -1 is not a number in \\[0, 10\\]" min_lr -1 RUN --resume FILE)
gpt_config_case("--resume with seed = 2^64" "seed: value 1.8446744073709552e\\+19 is not an integer in \\[0, 2\\^64 - 1\\]"
                seed 18446744073709551616 RUN --resume FILE)
gpt_config_case("--resume with heads = 3 of width 8" "width 8 is not divisible by heads 3" heads 3 RUN --resume FILE)
gpt_config_case("--resume with bias = \"yes\"" "bias: \"yes\" is not true or false" bias "\"yes\"" RUN --resume FILE)
gpt_config_case("--resume with preset = \"huge\"" "preset: \"huge\" is not one of" preset "\"huge\"" RUN --resume FILE)
gpt_config_case("--resume with precision = \"fp16\"" "precision: \"fp16\" is not one of 'fp32', 'bf16'" precision
                "\"fp16\"" RUN --resume FILE)
gpt_config_case("--resume with data = 5" "data: 5 is not a path" data 5 RUN --resume FILE)
gpt_config_case("--generate with layers 64 of width 4096" "64 layers of width 4096 need at least [0-9]+ parameters, but the file holds [0-9]+ values"
                layers 64 width 4096 RUN --generate --weights FILE)
# The training state beside it: whole numbers in range, or refused by name.
set(k 0)
foreach(edit "iter=4abc|'iter': value 4abc is not an integer in \\[0, 4\\]" "iter=5|'iter': value 5 "
             "iter=-1|'iter': value -1 " "batch_generator_offset=-1|'batch_generator_offset': value -1 "
             "dropout_generator_offset=1e3|'dropout_generator_offset': value 1e3 "
             "train_seconds=-2|'train_seconds': -2 is not a number of seconds")
  math(EXPR k "${k} + 1")
  string(REPLACE "|" ";" parts "${edit}")
  list(GET parts 0 e)
  list(GET parts 1 pattern)
  rewrite("${gck}" "${OUT}/gpt_s${k}.safetensors" "meta:${e}")
  expect("gpt --resume with ${e}" 1 "gpt_s${k}.safetensors: metadata ${pattern}" "${GPT}" --resume
         "${OUT}/gpt_s${k}.safetensors" --out "${OUT}/gpt_r" --check)
endforeach()

# A GPT-2 checkpoint's model entry, checked likewise.
execute_process(COMMAND "${GPT}" --init gpt2-124m --layers 1 --heads 2 --width 8 --context 16 --batch-size 2 --iters 4
                        --eval-iters 1 --data "${OUT}/corpus.txt" --tokenizer-dir "${TOKENIZER}" --threads 1 --quiet
                        --stop-after 2 --out "${OUT}/gpt2_stop" RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpt --init (tiny GPT-2 run) exited with ${rc}")
endif()
set(k 0)
foreach(edit "vocab_size=1e9|vocab_size: value 1000000000.0 is not an integer in \\[1, 1048576\\]"
             "block_size=4|block_size: value 4 is not an integer in \\[16, 8192\\]" "dropout=-1|dropout: value -1 "
             "layer_norm_eps=0|layer_norm_eps: value 0 " "gelu=\"relu\"|gelu: \"relu\" is not 'tanh' or 'none'"
             "bias=1|bias: 1 is not true or false" "tokenizer_dir=[-1]|tokenizer_dir: an array holding -1, not a byte"
             "init=null|init: a JSON null is not a string")
  math(EXPR k "${k} + 1")
  string(REPLACE "|" ";" parts "${edit}")
  list(GET parts 0 e)
  list(GET parts 1 pattern)
  rewrite("${OUT}/gpt2_stop/checkpoint.safetensors" "${OUT}/gpt2_s${k}.safetensors" "json:gpt2.${e}")
  expect("gpt --resume of a GPT-2 checkpoint with ${e}" 1 "gpt2_s${k}.safetensors: stored GPT-2 model: ${pattern}"
         "${GPT}" --resume "${OUT}/gpt2_s${k}.safetensors" --out "${OUT}/gpt_r" --check)
endforeach()

# Broken weights: --eval-only and --generate refuse them by name; --force-eval
# scores them after a warning, and a non-finite loss exits 1.
rewrite("${OUT}/gpt/model.safetensors" "${OUT}/gpt_nan.safetensors" "nan:ln_f.weight")
rewrite("${OUT}/gpt/model.safetensors" "${OUT}/gpt_huge.safetensors" "set:wte.weight=3e38")
foreach(kind nan huge)
  expect("gpt --eval-only on ${kind} weights" 1
         "gpt_${kind}.safetensors: tensor .*; refusing to evaluate it \\(--force-eval evaluates it anyway\\)" "${GPT}"
         --eval-only --weights "${OUT}/gpt_${kind}.safetensors" --data "${OUT}/corpus.txt" --out "${OUT}/gpt_eval")
  expect("gpt --generate on ${kind} weights" 1 "gpt_${kind}.safetensors: tensor .*; refusing" "${GPT}" --generate
         --weights "${OUT}/gpt_${kind}.safetensors")
endforeach()
expect_warned("gpt --eval-only --force-eval on NaN weights" 1 "warning: .*ln_f.weight \\(NaN or Inf\\)"
              "test loss of .*gpt_nan.safetensors is NaN" "${GPT}" --eval-only --force-eval
              --weights "${OUT}/gpt_nan.safetensors" --data "${OUT}/corpus.txt" --out "${OUT}/gpt_eval" --threads 1)
expect("gpt --force-eval without --eval-only" 2 "--force-eval is for --eval-only and --generate" "${GPT}" --force-eval
       --data "${OUT}/corpus.txt" --out "${OUT}/gpt_eval")
message(STATUS "damaged files: every case ended as expected")
