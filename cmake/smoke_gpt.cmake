# CTest smoke run (cmake -P) of the GPT demo on a small generated corpus (no
# downloaded data): a tiny model trains a few steps and leaves well-formed
# outputs; a run stopped half-way and resumed ends exactly where the
# uninterrupted one did, also when it stopped before its first evaluation;
# --eval-only reproduces the recorded loss; --generate continues a prompt;
# a resume on a changed corpus is refused unless --allow-data-change; corpora
# of any bytes (multi-byte UTF-8, UTF-16, every byte value, a file name that
# is not UTF-8) train, and what they leave reads back; bad flags exit 2 and
# bad files exit 1, each with one line. Variables: APP (the executable), OUT
# (a scratch directory).
include(${CMAKE_CURRENT_LIST_DIR}/smoke_gpt_common.cmake)
set(GPT_SMOKE_FLAGS "")
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
set(text "")
foreach(i RANGE 1 60)
  math(EXPR a "${i} * 7 % 13")
  string(APPEND text "line ${i}: the quick brown fox jumps over ${a} lazy dogs.\nTo be, or not to be; that is ${i}.\n")
endforeach()
file(WRITE "${OUT}/corpus.txt" "${text}")
set(model --data "${OUT}/corpus.txt" --layers 2 --heads 2 --width 16 --context 24 --batch-size 4 --iters 6
          --eval-interval 3 --eval-iters 2 --dropout 0.1 --sample-tokens 40 --threads 1 --quiet)

run_ok(${model} --out "${OUT}/a")
file(READ "${OUT}/a/metrics.json" ma)
string(JSON val_a GET "${ma}" final_val_loss)
string(JSON seconds GET "${ma}" train_seconds)
string(JSON tps GET "${ma}" tokens_per_second)
string(JSON params GET "${ma}" parameters)
string(JSON curve LENGTH "${ma}" val_loss)
string(JSON layers GET "${ma}" configuration layers)
if(NOT curve EQUAL 2 OR NOT layers EQUAL 2 OR params LESS 1000)
  message(FATAL_ERROR "expected 2 evaluations of a 2-layer model: ${ma}")
endif()
if(val_a MATCHES "nan|inf|null" OR val_a LESS_EQUAL 0 OR seconds LESS_EQUAL 0 OR tps LESS_EQUAL 0)
  message(FATAL_ERROR "bad metrics.json: ${ma}")
endif()
check_pngs("${OUT}/a" loss.png attention.png)
foreach(f samples.txt model.safetensors checkpoint.safetensors)
  if(NOT EXISTS "${OUT}/a/${f}")
    message(FATAL_ERROR "no ${f}")
  endif()
endforeach()

# Stopped after 3 steps, then resumed: the same losses, sample and weights.
run_ok(${model} --out "${OUT}/b" --stop-after 3)
run_ok(--resume "${OUT}/b/checkpoint.safetensors" --out "${OUT}/b" --threads 1 --quiet)
check_resumed_same("${OUT}/a" "${OUT}/b" model.safetensors "stopped after 3 steps")

# Stopped before its first evaluation (an empty history), then resumed: the same run.
run_ok(${model} --out "${OUT}/c" --stop-after 2)
run_ok(--resume "${OUT}/c/checkpoint.safetensors" --out "${OUT}/c" --threads 1 --quiet)
file(SHA256 "${OUT}/a/model.safetensors" ha)
file(SHA256 "${OUT}/c/model.safetensors" hc)
if(NOT ha STREQUAL hc)
  message(FATAL_ERROR "the run resumed from before its first evaluation differs")
endif()

# The corpus changed under a stopped run: refused with both fingerprints, or trained on with --allow-data-change.
file(WRITE "${OUT}/changing.txt" "${text}")
string(REPLACE "${OUT}/corpus.txt" "${OUT}/changing.txt" model_d "${model}")
run_ok(${model_d} --out "${OUT}/d" --stop-after 3)
file(APPEND "${OUT}/changing.txt" "To be, or not to be.\n")
execute_process(COMMAND "${APP}" --resume "${OUT}/d/checkpoint.safetensors" --out "${OUT}/d" --quiet RESULT_VARIABLE rc
                OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "changing.txt\\) changed since .*checkpoint.safetensors was written: it is now [0-9]+ bytes, fnv1a64 [0-9a-f]+, the checkpoint recorded 5155 bytes, fnv1a64 [0-9a-f]+ \\(--allow-data-change")
  message(FATAL_ERROR "--resume on a changed corpus: exit ${rc}, ${err}")
endif()
execute_process(COMMAND "${APP}" --resume "${OUT}/d/checkpoint.safetensors" --out "${OUT}/d" --quiet --allow-data-change
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT err MATCHES "note: the corpus .* changed since")
  message(FATAL_ERROR "--resume --allow-data-change on a changed corpus: exit ${rc}, ${err}")
endif()

# Text is bytes: each corpus trains to the end and leaves its model, --eval-only reproduces the
# recorded loss from it, and --generate without --prompt samples (a vocabulary without a newline too).
string(ASCII 255 ff)
set(utf8 "")
set(utf16 "\\377\\376")
set(every "")
foreach(i RANGE 1 40)
  string(APPEND utf8 "Größe ${i}: 東京 — naïve café ✓ 🙂\n")
  string(APPEND utf16 "G\\000r\\000\\366\\000\\337\\000e\\000 \\000\\034\\147")
endforeach()
foreach(i RANGE 0 255)
  math(EXPR hi "${i} / 64")
  math(EXPR mid "${i} / 8 % 8")
  math(EXPR lo "${i} % 8")
  string(APPEND every "\\${hi}${mid}${lo}")
endforeach()
file(WRITE "${OUT}/utf8.txt" "${utf8}")
execute_process(COMMAND printf "${utf16}" OUTPUT_FILE "${OUT}/utf16.txt")
execute_process(COMMAND printf "${every}${every}${every}${every}${every}${every}${every}${every}" OUTPUT_FILE "${OUT}/bytes${ff}.bin")
foreach(corpus utf8.txt utf16.txt bytes${ff}.bin)
  run_ok(--data "${OUT}/${corpus}" --layers 1 --heads 2 --width 16 --context 16 --batch-size 4 --iters 3 --eval-interval 2
         --eval-iters 1 --sample-tokens 40 --threads 1 --quiet --out "${OUT}/bytes")
  file(READ "${OUT}/bytes/metrics.json" mx)
  string(JSON val_x GET "${mx}" final_val_loss)
  run_ok(--eval-only --weights "${OUT}/bytes/model.safetensors" --data "${OUT}/${corpus}" --out "${OUT}/bytes_e" --threads 1)
  file(READ "${OUT}/bytes_e/eval.json" me)
  string(JSON val_e GET "${me}" final_val_loss)
  if(NOT val_e STREQUAL val_x)
    message(FATAL_ERROR "${corpus}: --eval-only gave ${val_e}, the run recorded ${val_x}")
  endif()
  run_ok(--resume "${OUT}/bytes/checkpoint.safetensors" --out "${OUT}/bytes" --check)
  run_ok(--generate --weights "${OUT}/bytes/model.safetensors" --sample-tokens 8 --threads 1)
endforeach()

run_ok(--eval-only --weights "${OUT}/a/model.safetensors" --data "${OUT}/corpus.txt" --out "${OUT}/e" --threads 1)
file(READ "${OUT}/e/eval.json" me)
string(JSON val_e GET "${me}" final_val_loss)
if(NOT val_e STREQUAL val_a)
  message(FATAL_ERROR "--eval-only gave ${val_e}, the run recorded ${val_a}")
endif()
run_ok(--generate --weights "${OUT}/a/model.safetensors" --prompt "To be" --sample-tokens 12 --seed 3)
if(NOT run_out MATCHES "^To be")
  message(FATAL_ERROR "--generate printed ${run_out}")
endif()
# --precision bf16 samples and scores in a bfloat16 autocast region, and says so.
run_ok(--generate --weights "${OUT}/a/model.safetensors" --prompt "To be" --sample-tokens 12 --seed 3 --precision bf16)
if(NOT run_out MATCHES "^To be" OR NOT run_err MATCHES "gpt: 12 tokens in .* tokens/s \\(KV cache, 5-token prompt, bf16,")
  message(FATAL_ERROR "--generate --precision bf16 printed ${run_out}, ${run_err}")
endif()
run_ok(--eval-only --weights "${OUT}/a/model.safetensors" --data "${OUT}/corpus.txt" --out "${OUT}/e16" --threads 1
       --precision bf16)
file(READ "${OUT}/e16/eval.json" me)
string(JSON val_e16 GET "${me}" final_val_loss)
string(JSON prec_e16 GET "${me}" precision)
if(NOT prec_e16 STREQUAL "bf16" OR val_e16 STREQUAL val_a OR NOT val_e16 GREATER 0)
  message(FATAL_ERROR "--eval-only --precision bf16 gave ${val_e16} (${prec_e16}); fp32 gave ${val_a}")
endif()

# Bad input: one line on stderr, exit 2 for flags (an unusable --out too), 1 for files (cases: "code|arg,arg,...").
file(WRITE "${OUT}/empty.txt" "")
file(WRITE "${OUT}/short.txt" "to be or not")
file(WRITE "${OUT}/other.txt" "${text}QZX~")
execute_process(COMMAND mkfifo "${OUT}/fifo")
set(cases
    "2|--iters,0" "2|--iters,-3" "2|--lr,-1" "2|--lr,1e309" "2|--iters,1e309" "2|--width,10,--heads,3"
    "2|--context,0" "2|--preset,huge" "2|--preset,nanogpt-cpu,--layers,2" "2|--eval-only" "2|--weights,x"
    "2|--seed,-1" "2|--temperature,-1" "2|--top-k,-1" "2|--dropout,1" "2|--batch-size,abc"
    "1|--data,${OUT}/empty.txt" "1|--data,${OUT}/short.txt" "1|--data,${OUT}/missing.txt" "1|--data,${OUT}/fifo"
    "1|--data,${OUT}" "1|--data,${OUT}/corpus.txt/below" "2|--out,${OUT}/corpus.txt/below,--data,${OUT}/corpus.txt"
    "1|--eval-only,--weights,${OUT}/a/model.safetensors,--data,${OUT}/other.txt"
    "1|--generate,--weights,${OUT}/a/model.safetensors,--prompt,Q~"
    "1|--generate,--weights,${OUT}/fifo" "1|--generate,--weights,${OUT}/corpus.txt"
    "1|--resume,${OUT}/a/model.safetensors")
check_bad_invocations("${cases}")
