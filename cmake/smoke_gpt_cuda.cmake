# CTest (cmake -P): the GPT demo on device "cuda" through the SIMT emulator
# (APP = gpt_emu) against the same run on the CPU, tiny, on both paths: the
# character-level model's losses agree within float32 rounding, and its
# saved model scored on the other device reproduces its loss; a run stopped
# on cuda and resumed on cuda ends bit-identical to the uninterrupted cuda
# run, character-level and GPT-2 (--init, the BPE tokenizer fixture) alike;
# --generate samples on cuda from both kinds of model, and greedy decoding
# with --cuda-graph gives the eager text, in fp32 and (GPT-2) in bf16.
# Variables: APP, COMPARE, TOKENIZER (tests/fixtures/gpt2_tiny_tokenizer), OUT.
include(${CMAKE_CURRENT_LIST_DIR}/device_runs.cmake)
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
set(text "")
foreach(i RANGE 1 40)
  string(APPEND text "line ${i}: to be, or not to be, that is the question; the quick brown fox.\n")
endforeach()
file(WRITE "${OUT}/corpus.txt" "${text}")
set(char --data "${OUT}/corpus.txt" --layers 1 --heads 2 --width 16 --context 16 --batch-size 4 --iters 4
         --eval-interval 2 --eval-iters 1 --sample-tokens 8 --dropout 0.1 --threads 1 --quiet)

run_app("gpt, cpu" ${char} --out "${OUT}/cpu")
run_app("gpt, cuda" ${char} --device cuda --out "${OUT}/cuda")
expect_close("cuda against cpu: losses" "${OUT}/cpu/metrics.json" "${OUT}/cuda/metrics.json" 1e-4 1e-6 /train_loss
             /val_loss /final_val_loss)
foreach(pair "cuda;cpu" "cpu;cuda")
  list(GET pair 0 saved_on)
  list(GET pair 1 eval_on)
  run_app("gpt --eval-only on ${eval_on} of the ${saved_on} model" --eval-only --weights
          "${OUT}/${saved_on}/model.safetensors" --data "${OUT}/corpus.txt" --device ${eval_on} --threads 1 --quiet
          --out "${OUT}/eval_${eval_on}")
  expect_close("loss of the ${saved_on} model on ${eval_on}" "${OUT}/${saved_on}/metrics.json"
               "${OUT}/eval_${eval_on}/eval.json" 1e-5 1e-7 /final_val_loss)
endforeach()

# Stopped and resumed on cuda: the uninterrupted cuda run's weights, bit for bit.
function(expect_same_file a b what)
  file(SHA256 "${a}" ha)
  file(SHA256 "${b}" hb)
  if(NOT ha STREQUAL hb)
    message(FATAL_ERROR "${what}: ${a} and ${b} differ")
  endif()
endfunction()
run_app("gpt, cuda, stopped" ${char} --device cuda --stop-after 2 --out "${OUT}/cuda_r")
run_app("gpt, cuda, resumed" --resume "${OUT}/cuda_r/checkpoint.safetensors" --device cuda --threads 1 --quiet
        --out "${OUT}/cuda_r")
expect_same_file("${OUT}/cuda/model.safetensors" "${OUT}/cuda_r/model.safetensors" "char-level resume on cuda")
set(gpt2 --init gpt2-124m --layers 1 --heads 2 --width 16 --context 16 --batch-size 2 --iters 4 --eval-interval 2
         --eval-iters 1 --sample-tokens 8 --data "${OUT}/corpus.txt" --tokenizer-dir "${TOKENIZER}" --threads 1 --quiet)
run_app("gpt --init, cuda" ${gpt2} --device cuda --out "${OUT}/gpt2")
run_app("gpt --init, cuda, stopped" ${gpt2} --device cuda --stop-after 2 --out "${OUT}/gpt2_r")
run_app("gpt --init, cuda, resumed" --resume "${OUT}/gpt2_r/checkpoint.safetensors" --device cuda --threads 1 --quiet
        --out "${OUT}/gpt2_r")
expect_same_file("${OUT}/gpt2/hf/model.safetensors" "${OUT}/gpt2_r/hf/model.safetensors" "GPT-2 resume on cuda")
run_app("gpt --generate on cuda" --generate --weights "${OUT}/cpu/model.safetensors" --device cuda --prompt "to be"
        --sample-tokens 8)
run_app("gpt --hf --generate on cuda" --hf "${OUT}/gpt2/hf" --generate --prompt "to be" --max-new-tokens 8
        --device cuda)
# Greedy decoding past the context of 16, eagerly and with each token's step
# a CUDA graph: the same text.
foreach(mode eager graph)
  set(flag "")
  if(mode STREQUAL "graph")
    set(flag --cuda-graph)
  endif()
  execute_process(COMMAND "${APP}" --generate --weights "${OUT}/cpu/model.safetensors" --device cuda --prompt "to be"
                          --sample-tokens 24 --temperature 0 ${flag} RESULT_VARIABLE rc OUTPUT_VARIABLE text_${mode}
                          ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gpt --generate on cuda (${mode}): exited with ${rc}\n${err}")
  endif()
endforeach()
if(text_eager STREQUAL "" OR NOT text_eager STREQUAL text_graph)
  message(FATAL_ERROR "gpt --generate --cuda-graph: '${text_graph}', eagerly '${text_eager}'")
endif()
# The GPT-2 model in a bf16 autocast region: the graphed step (bf16 copies
# of the GEMM weights, a bf16 cache) greedily gives the eager region's text.
foreach(mode eager graph)
  set(flag "")
  if(mode STREQUAL "graph")
    set(flag --cuda-graph)
  endif()
  execute_process(COMMAND "${APP}" --hf "${OUT}/gpt2/hf" --generate --prompt "to be" --max-new-tokens 12 --device cuda
                          --precision bf16 --temperature 0 ${flag} RESULT_VARIABLE rc OUTPUT_VARIABLE bf16_${mode}
                          ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gpt --hf --generate --precision bf16 on cuda (${mode}): exited with ${rc}\n${err}")
  endif()
endforeach()
if(bf16_eager STREQUAL "" OR NOT bf16_eager STREQUAL bf16_graph)
  message(FATAL_ERROR "gpt --generate --cuda-graph --precision bf16: '${bf16_graph}', eagerly '${bf16_eager}'")
endif()
