# CTest (cmake -P): the ViT demo on device "cuda" through the SIMT emulator
# (APP = vit_emu) against the same run on the CPU, on a tiny model and data
# set (MAKE_DATA writes it). A run stopped after epoch 1 on one device and
# resumed on the other must give the uninterrupted CPU run's losses and
# accuracies within float32 rounding (checkpoints hold CPU tensors; resume
# moves them to the device), and --eval-only of a CPU model on cuda must
# reproduce its recorded accuracy. Variables: APP, MAKE_DATA, COMPARE, OUT.
include(${CMAKE_CURRENT_LIST_DIR}/device_runs.cmake)
file(REMOVE_RECURSE "${OUT}")
execute_process(COMMAND "${MAKE_DATA}" "${OUT}/data" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_vit_smoke_data exited with ${rc}")
endif()
# Dropout and mixup included: the device must draw the CPU's random numbers.
set(tiny --data-dir "${OUT}/data" --epochs 2 --batch-size 16 --limit-train 64 --limit-test 32 --width 16 --depth 1
         --heads 2 --mlp 32 --lr 3e-3 --warmup-epochs 0.5 --dropout 0.1 --mixup 0.2 --threads 2 --quiet)
set(resume --data-dir "${OUT}/data" --threads 2 --quiet)

run_app("vit, cpu, 2 epochs" ${tiny} --out "${OUT}/cpu")
run_app("vit, cuda, stopped after epoch 1" ${tiny} --device cuda --stop-after 1 --out "${OUT}/cuda_cpu")
run_app("vit, the cuda checkpoint resumed on cpu" --resume "${OUT}/cuda_cpu/checkpoint.safetensors" ${resume}
        --out "${OUT}/cuda_cpu")
run_app("vit, cpu, stopped after epoch 1" ${tiny} --stop-after 1 --out "${OUT}/cpu_cuda")
run_app("vit, the cpu checkpoint resumed on cuda" --resume "${OUT}/cpu_cuda/checkpoint.safetensors" ${resume}
        --device cuda --out "${OUT}/cpu_cuda")

foreach(mixed cuda_cpu cpu_cuda)
  expect_close("${mixed} against cpu: losses" "${OUT}/cpu/metrics.json" "${OUT}/${mixed}/metrics.json" 1e-4 1e-6
               /per_epoch/train_loss /per_epoch/test_loss /per_epoch/lr)
  # Accuracy over 32 test images: an argmax near a tie may flip one image.
  expect_close("${mixed} against cpu: accuracy" "${OUT}/cpu/metrics.json" "${OUT}/${mixed}/metrics.json" 0 0.032
               /per_epoch/test_accuracy)
endforeach()
file(READ "${OUT}/cpu_cuda/metrics.json" m)
string(JSON device GET "${m}" device)
if(NOT device STREQUAL "cuda")
  message(FATAL_ERROR "the resumed run's metrics.json says device '${device}', expected cuda")
endif()
if(NOT EXISTS "${OUT}/cpu_cuda/attention.png")
  message(FATAL_ERROR "no attention.png from the run that finished on cuda")
endif()

# The CPU's weights evaluated on cuda: the accuracy recorded at save.
run_app("vit --eval-only on cuda" --eval-only --weights "${OUT}/cpu/model.safetensors" --data-dir "${OUT}/data"
        --device cuda --quiet --out "${OUT}/eval_cuda")
expect_recorded("--eval-only on cuda of the cpu model" "${OUT}/eval_cuda/eval.json" test_accuracy)
