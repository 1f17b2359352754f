# CTest (cmake -P): the seq2seq demo on device "cuda" through the SIMT
# emulator (APP = seq2seq_emu) against the same run on the CPU, tiny: the
# per-epoch losses and exact-match scores agree within float32 rounding, the
# greedy decodings of the test dates are the same strings, and
# each device's saved model.safetensors (CPU tensors) scored on the other
# device with --eval-only reproduces the exact match recorded at save.
# Variables: APP, COMPARE, OUT.
include(${CMAKE_CURRENT_LIST_DIR}/device_runs.cmake)
file(REMOVE_RECURSE "${OUT}")
set(tiny --epochs 2 --train-size 96 --test-size 16 --batch-size 32 --hidden 8 --heatmaps 1 --threads 2 --quiet)

run_app("seq2seq, cpu" ${tiny} --out "${OUT}/cpu")
run_app("seq2seq, cuda" ${tiny} --device cuda --out "${OUT}/cuda")
expect_close("cuda against cpu: losses" "${OUT}/cpu/metrics.json" "${OUT}/cuda/metrics.json" 1e-4 1e-6 /train_loss
             /val_loss /test_loss)
# Exact match over 16 dates: an argmax near a tie may flip one.
expect_close("cuda against cpu: exact match" "${OUT}/cpu/metrics.json" "${OUT}/cuda/metrics.json" 0 0.0626
             /val_exact_match /test_exact_match)
# Greedy decoding: the same output string for every test date.
file(READ "${OUT}/cpu/predictions.csv" p_cpu)
file(READ "${OUT}/cuda/predictions.csv" p_cuda)
if(NOT p_cpu STREQUAL p_cuda)
  message(FATAL_ERROR "the greedy decodings differ between cpu and cuda:\n${p_cpu}\n---\n${p_cuda}")
endif()
foreach(png attention_0.png attention_longest.png loss.png)
  if(NOT EXISTS "${OUT}/cuda/${png}")
    message(FATAL_ERROR "no ${png} from the cuda run")
  endif()
endforeach()

# Each device's weights scored on the other one.
foreach(pair "cuda;cpu" "cpu;cuda")
  list(GET pair 0 saved_on)
  list(GET pair 1 eval_on)
  run_app("seq2seq --eval-only on ${eval_on} of the ${saved_on} model" --eval-only --weights
          "${OUT}/${saved_on}/model.safetensors" --device ${eval_on} --threads 2 --quiet --out "${OUT}/eval_${eval_on}")
  expect_recorded("--eval-only on ${eval_on} of the ${saved_on} model" "${OUT}/eval_${eval_on}/eval.json"
                  test_exact_match)
  expect_close("test loss of the ${saved_on} model on ${eval_on}" "${OUT}/${saved_on}/metrics.json"
               "${OUT}/eval_${eval_on}/eval.json" 1e-5 1e-7 /test_loss)
endforeach()
