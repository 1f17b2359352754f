# CTest (cmake -P): what --resume does with the other flags, and refusals
# that name their input. A tiny gpt run and a tiny vit run stop half-way,
# then:
#   gpt and vit --resume with a flag of the model, the data or the optimizer
#     given with another value than the checkpoint's -> exit 2, one line
#     naming the flag, both values and the file; the same value -> accepted;
#     --iters / --epochs before where the checkpoint stopped -> exit 2;
#   vit --eval-only: the same refusals, --limit-test honoured, --epochs refused;
#   gpt --resume --iters M: the cosine keeps the length the run started with,
#     so a run stopped at 4 of 6 and resumed with --iters 10 --stop-after 6
#     (and another --eval-interval) holds, at iteration 6, the tensors of
#     the uninterrupted 6-step run, bit for bit;
#   a checkpoint whose curves hold NaN ("nan" in its metadata) resumes, and
#     one holding null (what a NaN was once written as) is refused by name;
#   a run resumed from NaN weights saves a checkpoint whose resume is
#     refused naming the file and the optimizer's entry;
#   errors from inside a load name the file: a missing optimizer entry, a
#     model tensor missing at --eval-only, a stored patch size that does not
#     divide the images ("stored configuration: patch_size"), --out '';
#   an unreadable file -> "Permission denied" (as root, run as nobody);
#   gpt --eval-only / --generate with a flag of the model or the optimizer
#     -> exit 2 naming it (the model is the file's), sampling flags honoured;
#   gpt --hf DIR: NaN or overflowing weights refused by name for --generate
#     (with --force-eval a warning and exit 0) and for fine-tuning;
#   gpt --eval-only --force-eval on weights of 3e38: the warning, a finite
#     loss, exit 0, and eval.json listing the tensor (apps/gpt/README.md);
#   cnn, seq2seq and attention_regression --eval-only after a tiny run: a
#     model flag with another value than the file's -> exit 2 naming the
#     flag, both values and the file; the same value -> accepted; a training
#     flag -> exit 2 naming it.
# Variables: GPT, VIT, CNN, SEQ2SEQ, ATTENTION_REGRESSION, MAKE_DATA, REWRITE,
# COMPARE, TOKENIZER, OUT.
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
set(EXPECT_TIMEOUT 120)
include("${CMAKE_CURRENT_LIST_DIR}/expect.cmake")  # expect, expect_warned, rewrite
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} exited with ${rc}:\n${err}")
  endif()
endfunction()
execute_process(COMMAND id -u OUTPUT_VARIABLE euid OUTPUT_STRIP_TRAILING_WHITESPACE)

# ---- gpt --resume --------------------------------------------------------
set(text "")
foreach(i RANGE 60)
  string(APPEND text "line ${i}: to be or not to be, that is the question; whether tis nobler in the mind\n")
endforeach()
file(WRITE "${OUT}/corpus.txt" "${text}")
set(tiny --data "${OUT}/corpus.txt" --layers 1 --heads 2 --width 8 --context 16 --batch-size 2 --warmup 1 --eval-iters 1
         --sample-tokens 4 --threads 1 --quiet)
run("gpt (tiny run, stopped at 4 of 6)" "${GPT}" ${tiny} --iters 6 --eval-interval 2 --stop-after 4 --out "${OUT}/gpt_stop")
set(gck "${OUT}/gpt_stop/checkpoint.safetensors")
set(kept "that .*gpt_stop/checkpoint.safetensors was trained with: a resumed run keeps its checkpoint's model")
foreach(case "--layers;2;--layers 2 differs from the 1 ${kept}" "--lr;0.01;--lr 0.01 differs from the 0.001 ${kept}"
             "--seed;5;--seed 5 differs from the 1337 ${kept}" "--batch-size;3;--batch-size 3 differs from the 2 ${kept}"
             "--precision;bf16;--precision 'bf16' differs from the 'fp32' ${kept}"
             "--warmup;7;--warmup 7 differs from the 1 ${kept}" "--dropout;0.5;--dropout 0.5 differs from the 0.0 ${kept}")
  list(GET case 0 flag)
  list(GET case 1 value)
  list(GET case 2 pattern)
  expect("gpt --resume ${flag} ${value}" 2 "${pattern}" "${GPT}" --resume "${gck}" ${flag} ${value} --out "${OUT}/gpt_r"
         --check)
endforeach()
expect("gpt --resume with the stored values given again" 0 "^$" "${GPT}" --resume "${gck}" --layers 1 --lr 0.001
       --batch-size 2 --seed 1337 --out "${OUT}/gpt_r" --check)
expect("gpt --resume --iters before the checkpoint" 2
       "--iters 3 is before iteration 4, where .*gpt_stop/checkpoint.safetensors stopped" "${GPT}" --resume "${gck}"
       --iters 3 --out "${OUT}/gpt_r" --check)
# The schedule keeps its stored length: extended and stopped at 6, the run is the uninterrupted 6-step one.
run("gpt (tiny run, 6 iterations)" "${GPT}" ${tiny} --iters 6 --eval-interval 2 --out "${OUT}/gpt_full")
run("gpt --resume --iters 10 --stop-after 6" "${GPT}" --resume "${gck}" --iters 10 --stop-after 6 --eval-interval 3
    --threads 1 --quiet --out "${OUT}/gpt_long")
run("compare_safetensors (the uninterrupted run, the extended one at 6)" "${COMPARE}"
    "${OUT}/gpt_full/checkpoint.safetensors" "${OUT}/gpt_long/checkpoint.safetensors" 0)
file(STRINGS "${OUT}/gpt_long/checkpoint.safetensors" head REGEX "lr_decay_iters" LIMIT_INPUT 65536)
if(NOT head MATCHES "\"iters\\\\\":10," OR NOT head MATCHES "lr_decay_iters\\\\\":6,")
  message(FATAL_ERROR "gpt --resume --iters 10: the checkpoint does not store iters 10 and lr_decay_iters 6:\n${head}")
endif()

# NaN in the curves: stored as "nan", read back; null (what it once was) refused by name.
rewrite("${gck}" "${OUT}/gpt_nan_curve.safetensors"
        "meta:history={\"iters\":[2.0,4.0],\"train_loss\":[\"nan\",2.5],\"val_loss\":[\"inf\",\"nan\"]}")
expect("gpt --resume with NaN in its curves" 0 "^$" "${GPT}" --resume "${OUT}/gpt_nan_curve.safetensors"
       --out "${OUT}/gpt_r" --check)
rewrite("${gck}" "${OUT}/gpt_null_curve.safetensors"
        "meta:history={\"iters\":[2.0,4.0],\"train_loss\":[null,2.5],\"val_loss\":[2.5,2.5]}")
expect("gpt --resume with null in its curves" 1
       "gpt_null_curve.safetensors: bad checkpoint metadata: series 'train_loss' holds a value that is not a number"
       "${GPT}" --resume "${OUT}/gpt_null_curve.safetensors" --out "${OUT}/gpt_r" --check)
# A run gone NaN saves; its resume is refused naming the file and the optimizer's entry.
rewrite("${gck}" "${OUT}/gpt_nan_weights.safetensors" "nan:model.ln_f.weight")
execute_process(COMMAND "${GPT}" --resume "${OUT}/gpt_nan_weights.safetensors" --iters 8 --stop-after 6 --quiet
                        --out "${OUT}/gpt_diverged" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0 OR NOT EXISTS "${OUT}/gpt_diverged/checkpoint.safetensors")
  message(FATAL_ERROR "gpt --resume from NaN weights: exit ${rc}, or no checkpoint saved")
endif()
expect_warned("gpt --resume of a run gone NaN" 1 "warning: .*gpt_diverged/checkpoint.safetensors holds suspicious"
              "gpt_diverged/checkpoint.safetensors': optimizer state: optimizer load_state_dict: 'state.0.0.exp_avg' holds NaN"
              "${GPT}" --resume "${OUT}/gpt_diverged/checkpoint.safetensors" --out "${OUT}/gpt_r" --check)
# An optimizer entry missing: the optimizer's own words, with the file and the part.
rewrite("${gck}" "${OUT}/gpt_no_lr.safetensors" "drop:optimizer.param_groups.0.lr")
expect("gpt --resume without an optimizer entry" 1
       "training checkpoint '.*gpt_no_lr.safetensors': optimizer state: optimizer load_state_dict: missing entry 'param_groups.0.lr'"
       "${GPT}" --resume "${OUT}/gpt_no_lr.safetensors" --out "${OUT}/gpt_r" --check)
# An empty argument (a function's ARGN would drop it).
execute_process(COMMAND "${GPT}" --data "${OUT}/corpus.txt" --out "" --check RESULT_VARIABLE rc OUTPUT_QUIET
                ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 2 OR NOT err MATCHES "^gpt: --out '': an empty path \\(give the directory to write the outputs into\\)\n$")
  message(FATAL_ERROR "gpt --out '': exit ${rc} (expected 2), stderr:\n${err}")
endif()

# --eval-only and --generate take the model from the file: its flags are refused, not ignored.
expect("gpt --eval-only --layers" 2 "^gpt: --layers is for training; --eval-only takes the model from --weights$" "${GPT}"
       --eval-only --weights "${OUT}/gpt_full/model.safetensors" --data "${OUT}/corpus.txt" --layers 2 --out "${OUT}/gpt_e")
expect("gpt --generate --lr" 2 "^gpt: --lr is for training; --generate takes the model from --weights$" "${GPT}"
       --generate --weights "${OUT}/gpt_full/model.safetensors" --lr 0.1)
expect("gpt --eval-only --top-k" 2 "^gpt: --top-k is for training and --generate, not --eval-only$" "${GPT}" --eval-only
       --weights "${OUT}/gpt_full/model.safetensors" --data "${OUT}/corpus.txt" --top-k 3 --out "${OUT}/gpt_e")
expect("gpt --generate with its sampling flags" 0
       "^gpt: 4 tokens in [0-9.]+s: [0-9.]+ tokens/s \\(KV cache, 1-token prompt, fp32, [0-9]+ threads?\\)$"
       "${GPT}" --generate --weights "${OUT}/gpt_full/model.safetensors" --sample-tokens 4
       --seed 3 --temperature 0.5 --top-k 3 --top-p 0.9)

# ---- gpt: weights of 3e38 with --force-eval; GPT-2 from --hf -------------
rewrite("${OUT}/gpt_full/model.safetensors" "${OUT}/gpt_huge.safetensors" "set:wte.weight=3e38")
expect("gpt --eval-only --force-eval on weights of 3e38" 0
       "warning: .*gpt_huge.safetensors holds suspicious values: wte.weight \\(values up to 3e\\+38" "${GPT}" --eval-only
       --force-eval --weights "${OUT}/gpt_huge.safetensors" --data "${OUT}/corpus.txt" --out "${OUT}/gpt_eval" --threads 1)
file(READ "${OUT}/gpt_eval/eval.json" ev)
string(JSON first GET "${ev}" suspicious_tensors 0)
string(JSON loss GET "${ev}" final_val_loss)
if(NOT first MATCHES "^wte.weight \\(values up to 3e\\+38" OR NOT loss MATCHES "^[0-9.e+-]+$")
  message(FATAL_ERROR "gpt --eval-only --force-eval on weights of 3e38: eval.json:\n${ev}")
endif()
run("gpt --init (tiny GPT-2 run)" "${GPT}" --init gpt2-124m --layers 1 --heads 2 --width 8 --context 16 --batch-size 2
    --iters 2 --eval-iters 1 --sample-tokens 2 --data "${OUT}/corpus.txt" --tokenizer-dir "${TOKENIZER}" --threads 1
    --quiet --out "${OUT}/gpt2")
foreach(kind nan huge)
  file(COPY "${OUT}/gpt2/hf/" DESTINATION "${OUT}/hf_${kind}")
endforeach()
rewrite("${OUT}/gpt2/hf/model.safetensors" "${OUT}/hf_nan/model.safetensors" "nan:h.0.mlp.c_fc.weight")
rewrite("${OUT}/gpt2/hf/model.safetensors" "${OUT}/hf_huge/model.safetensors" "set:wte.weight=3e38")
foreach(kind nan huge)
  expect("gpt --hf --generate on ${kind} weights" 1
         "hf_${kind}/model.safetensors: tensor .*; refusing to evaluate it \\(--force-eval evaluates it anyway\\)" "${GPT}"
         --hf "${OUT}/hf_${kind}" --generate --max-new-tokens 2)
  expect("gpt --hf --generate --force-eval on ${kind} weights" 0 "warning: .*hf_${kind}/model.safetensors holds suspicious"
         "${GPT}" --hf "${OUT}/hf_${kind}" --generate --max-new-tokens 2 --force-eval)
  expect("gpt --hf fine-tuning ${kind} weights" 1 "--hf .*hf_${kind}/model.safetensors: tensor .*; refusing to train from it"
         "${GPT}" --hf "${OUT}/hf_${kind}" --data "${OUT}/corpus.txt" --iters 1 --out "${OUT}/gpt_r" --check)
endforeach()

# ---- an unreadable file: "Permission denied" ------------------------------
file(COPY "${OUT}/gpt_full/model.safetensors" DESTINATION "${OUT}/private")
execute_process(COMMAND chmod 755 "${OUT}")
execute_process(COMMAND chmod 600 "${OUT}/private/model.safetensors")
find_program(SETPRIV setpriv)
if(NOT euid STREQUAL "0")
  expect("gpt --generate on an unreadable file" 1 "model.safetensors'?: cannot open for reading: Permission denied"
         "${GPT}" --generate --weights "${OUT}/private/model.safetensors")
elseif(SETPRIV)  # root reads anything: the run drops to nobody
  expect("gpt --generate on an unreadable file" 1 "model.safetensors'?: cannot open for reading: Permission denied"
         "${SETPRIV}" --reuid=65534 --regid=65534 --clear-groups "${GPT}" --generate --weights
         "${OUT}/private/model.safetensors")
else()
  message(STATUS "skipped the unreadable-file case: root without setpriv")
endif()

# ---- vit --resume ----------------------------------------------------------
run("make_vit_smoke_data" "${MAKE_DATA}" "${OUT}/data")
run("vit (tiny run, stopped after 2 of 3 epochs)" "${VIT}" --data-dir "${OUT}/data" --epochs 3 --stop-after 2
    --batch-size 32 --width 16 --depth 1 --heads 2 --mlp 16 --threads 1 --quiet --limit-train 64 --limit-test 32
    --out "${OUT}/vit")
set(vck "${OUT}/vit/checkpoint.safetensors")
set(kept "that .*vit/checkpoint.safetensors was trained with: a resumed run keeps its checkpoint's model, data and recipe")
foreach(case "--width;32;--width 32 differs from the 16 ${kept}" "--randaugment;2,9;--randaugment 2,9 differs from the 0,9 ${kept}"
             "--lr;0.1;--lr 0.1 differs from the 0.002 ${kept}" "--data;mnist;--data 'mnist' differs from the 'fashion-mnist' ${kept}"
             "--limit-train;16;--limit-train 16 differs from the 64 ${kept}" "--hflip;on;--hflip 'on' differs from the 'auto' ${kept}")
  list(GET case 0 flag)
  list(GET case 1 value)
  list(GET case 2 pattern)
  expect("vit --resume ${flag} ${value}" 2 "${pattern}" "${VIT}" --data-dir "${OUT}/data" --resume "${vck}" ${flag} ${value}
         --out "${OUT}/vit_r" --check)
endforeach()
expect("vit --resume --epochs 5 --limit-test 16 --width 16" 0 "^$" "${VIT}" --data-dir "${OUT}/data" --resume "${vck}"
       --epochs 5 --limit-test 16 --width 16 --out "${OUT}/vit_r" --check)
expect("vit --resume --epochs below the checkpoint's" 2 "--epochs 1 is fewer than the 2 epochs .*vit/checkpoint.safetensors has trained"
       "${VIT}" --data-dir "${OUT}/data" --resume "${vck}" --epochs 1 --out "${OUT}/vit_r" --check)
expect("vit --eval-only --width" 2
       "--width 32 differs from the 16 that .*vit/checkpoint.safetensors was trained with: --eval-only scores the file's model"
       "${VIT}" --data-dir "${OUT}/data" --eval-only --weights "${vck}" --width 32 --out "${OUT}/vit_e")
expect("vit --eval-only --epochs" 2 "^vit: --epochs is for training, not --eval-only$" "${VIT}" --data-dir "${OUT}/data"
       --eval-only --weights "${vck}" --epochs 3 --out "${OUT}/vit_e")
run("vit --eval-only --limit-test 16" "${VIT}" --data-dir "${OUT}/data" --eval-only --weights "${vck}" --limit-test 16
    --out "${OUT}/vit_e" --quiet)
file(READ "${OUT}/vit_e/eval.json" ev)
string(JSON images GET "${ev}" test_images)
if(NOT images EQUAL 16)
  message(FATAL_ERROR "vit --eval-only --limit-test 16 scored ${images} images")
endif()
rewrite("${vck}" "${OUT}/vit_p5.safetensors" "json:config.patch_size=5")
expect("vit --resume with a stored patch size that does not divide the images" 1
       "vit_p5.safetensors: stored configuration: patch_size 5 does not divide the 28x28 images" "${VIT}" --data-dir
       "${OUT}/data" --resume "${OUT}/vit_p5.safetensors" --out "${OUT}/vit_r" --check)
expect("vit --patch-size 5 (the flag)" 2 "^vit: --patch-size 5 does not divide the 28x28 images" "${VIT}" --data-dir
       "${OUT}/data" --patch-size 5 --out "${OUT}/vit_r" --check)
rewrite("${vck}" "${OUT}/vit_no_head.safetensors" "drop:model.head.bias")
expect("vit --eval-only with a tensor missing" 1 "vit_no_head.safetensors: load_state_dict: .*head.bias" "${VIT}"
       --data-dir "${OUT}/data" --eval-only --weights "${OUT}/vit_no_head.safetensors" --out "${OUT}/vit_r")
rewrite("${vck}" "${OUT}/vit_no_moment.safetensors" "drop:optimizer.state.0.0.exp_avg")
expect("vit --resume without an Adam moment" 1 "training checkpoint '.*vit_no_moment.safetensors': optimizer state: "
       "${VIT}" --data-dir "${OUT}/data" --resume "${OUT}/vit_no_moment.safetensors" --out "${OUT}/vit_r")

# ---- cnn, seq2seq, attention_regression --eval-only ------------------------
set(scores "was trained with: --eval-only scores the file's model")
run("cnn (tiny run)" "${CNN}" --data-dir "${OUT}/data" --epochs 1 --batch-size 32 --widths 4,8 --blocks 1,1
    --limit-train 64 --limit-test 32 --threads 1 --quiet --out "${OUT}/cnn")
set(cnn_eval "${CNN}" --data-dir "${OUT}/data" --eval-only --weights "${OUT}/cnn/model.safetensors" --out "${OUT}/cnn_e")
expect("cnn --eval-only --widths" 2
       "^cnn: --widths 8,8 differs from the 4,8 that .*cnn/model.safetensors ${scores} \\(leave --widths out\\)$"
       ${cnn_eval} --widths 8,8)
expect("cnn --eval-only --blocks" 2 "^cnn: --blocks 2,1 differs from the 1,1 that .*cnn/model.safetensors ${scores}"
       ${cnn_eval} --blocks 2,1)
expect("cnn --eval-only with the stored sizes" 0 "^$" ${cnn_eval} --widths 4,8 --blocks 1,1 --limit-test 16 --quiet)
expect("cnn --eval-only --lr" 2 "^cnn: --lr is for training, not --eval-only \\(leave it out\\)$" ${cnn_eval} --lr 0.1)
run("seq2seq (tiny run)" "${SEQ2SEQ}" --train-size 64 --test-size 16 --hidden 8 --epochs 1 --heatmaps 0 --threads 1
    --quiet --out "${OUT}/seq2seq")
set(s2s_eval "${SEQ2SEQ}" --eval-only --weights "${OUT}/seq2seq/model.safetensors" --out "${OUT}/seq2seq_e")
foreach(case "--hidden;16;--hidden 16 differs from the 8" "--model;transformer;--model 'transformer' differs from the 'gru'"
             "--seed;3;--seed 3 differs from the 0" "--train-size;65;--train-size 65 differs from the 64"
             "--test-size;15;--test-size 15 differs from the 16")
  list(GET case 0 flag)
  list(GET case 1 value)
  list(GET case 2 pattern)
  expect("seq2seq --eval-only ${flag} ${value}" 2 "^seq2seq: ${pattern} that .*seq2seq/model.safetensors ${scores}"
         ${s2s_eval} ${flag} ${value})
endforeach()
expect("seq2seq --eval-only with the stored values" 0 "^$" ${s2s_eval} --model gru --hidden 8 --seed 0 --train-size 64
       --test-size 16 --beam 2 --quiet)
expect("seq2seq --eval-only --epochs" 2 "^seq2seq: --epochs is for training, not --eval-only" ${s2s_eval} --epochs 2)
run("attention_regression (tiny run)" "${ATTENTION_REGRESSION}" --model single-head --epochs 1 --threads 1 --quiet
    --out "${OUT}/ar")
set(ar_eval "${ATTENTION_REGRESSION}" --eval-only --weights "${OUT}/ar/model.safetensors" --out "${OUT}/ar_e")
expect("attention_regression --eval-only --model" 2
       "^attention_regression: --model 'transformer' differs from the 'single-head' that .*ar/model.safetensors ${scores}"
       ${ar_eval} --model transformer)
expect("attention_regression --eval-only --model (the stored kind)" 0 "^$" ${ar_eval} --model single-head --quiet)
expect("attention_regression --eval-only --lr" 2 "^attention_regression: --lr is for training, not --eval-only"
       ${ar_eval} --lr 0.1)
message(STATUS "resume and refusals: every case ended as expected")
