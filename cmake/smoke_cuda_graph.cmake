# CTest (cmake -P): a demo's training with --cuda-graph against the same run
# without it, on device "cuda" through the SIMT emulator, tiny: the step is
# captured after its eager warm-up steps and replayed for the following
# batches (apps/common/graph_step.h), and the two runs must agree bit for
# bit: every loss, learning rate and accuracy in metrics.json, and the saved
# weights. metrics.json's cuda_graph_replays says the graph really ran.
# Variables: NAME (vit, attention_regression, gpt or gpt2), APP (the demo
# linked with the emulated backend), COMPARE (compare_json), COMPARE_TENSORS
# (compare_safetensors), OUT; MAKE_DATA for vit, TOKENIZER for gpt2.
include(${CMAKE_CURRENT_LIST_DIR}/device_runs.cmake)
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
set(text "")  # gpt's corpus
foreach(i RANGE 1 40)
  string(APPEND text "line ${i}: to be, or not to be, that is the question; the quick brown fox.\n")
endforeach()
file(WRITE "${OUT}/corpus.txt" "${text}")

if(NAME STREQUAL "vit")
  execute_process(COMMAND "${MAKE_DATA}" "${OUT}/data" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "make_vit_smoke_data exited with ${rc}")
  endif()
  # 4 steps an epoch: 2 eager warm-up steps, then 6 replays; dropout on.
  set(args --data-dir "${OUT}/data" --epochs 2 --batch-size 16 --limit-train 64 --limit-test 32 --width 16 --depth 1
           --heads 2 --mlp 32 --lr 3e-3 --warmup-epochs 0.5 --dropout 0.1 --threads 2 --quiet)
  set(numbers /per_epoch/train_loss /per_epoch/test_loss /per_epoch/test_accuracy /per_epoch/lr)
  set(weights model.safetensors)
elseif(NAME STREQUAL "attention_regression")
  # 20 sequences in batches of 8, 8 and 4: the last batch of each epoch
  # runs eagerly, the full ones replay once warmed up.
  set(args --model encoder --epochs 4 --batch-size 8 --threads 2 --quiet)
  set(numbers /train_loss /val_loss /lr /test_mse)
  set(weights model.safetensors)
elseif(NAME STREQUAL "gpt")
  set(args --data "${OUT}/corpus.txt" --layers 1 --heads 2 --width 16 --context 16 --batch-size 4 --iters 5
           --eval-interval 5 --eval-iters 1 --sample-tokens 8 --dropout 0.1 --threads 1 --quiet)
  set(numbers /train_loss /val_loss /final_val_loss)
  set(weights model.safetensors)
elseif(NAME STREQUAL "gpt2")
  set(args --init gpt2-124m --layers 1 --heads 2 --width 16 --context 16 --batch-size 2 --iters 5 --eval-interval 5
           --eval-iters 1 --sample-tokens 8 --dropout 0.1 --data "${OUT}/corpus.txt" --tokenizer-dir "${TOKENIZER}"
           --threads 1 --quiet)
  set(numbers /train_loss /val_loss /final_val_loss)
  set(weights hf/model.safetensors)
else()
  message(FATAL_ERROR "NAME must be vit, attention_regression, gpt or gpt2, not '${NAME}'")
endif()

run_app("${NAME}, cuda, eager" ${args} --device cuda --out "${OUT}/eager")
run_app("${NAME}, cuda, --cuda-graph" ${args} --device cuda --cuda-graph --out "${OUT}/graph")
expect_close("${NAME} --cuda-graph against eager" "${OUT}/eager/metrics.json" "${OUT}/graph/metrics.json" 0 0
             ${numbers})
execute_process(COMMAND "${COMPARE_TENSORS}" "${OUT}/eager/${weights}" "${OUT}/graph/${weights}" 0
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${NAME} weights, --cuda-graph against eager:\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NAME}: the weights trained with --cuda-graph differ from the eager run's")
endif()
file(READ "${OUT}/graph/metrics.json" m)
string(JSON replays GET "${m}" cuda_graph_replays)
if(replays LESS 1)
  message(FATAL_ERROR "${NAME} --cuda-graph: no step was replayed (cuda_graph_replays ${replays})")
endif()
message(STATUS "${NAME} --cuda-graph: ${replays} steps replayed")
