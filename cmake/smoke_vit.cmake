# CTest smoke run (cmake -P) of the ViT demo on a tiny generated data set
# (MAKE_DATA writes Fashion-MNIST-format gzip IDX files): outputs exist and
# are well-formed; a run stopped after epoch 1 and resumed equals an
# uninterrupted one (metrics and weights, bit for bit); --eval-only on the
# saved weights reproduces the recorded accuracy; bad flags exit with 2;
# --device cuda without a GPU exits with 1 and says why.
# Variables: APP, MAKE_DATA, OUT (a scratch directory).
include(${CMAKE_CURRENT_LIST_DIR}/smoke_vit_common.cmake)
make_smoke_data()
set(tiny --data-dir "${OUT}/data" --epochs 2 --batch-size 32 --width 16 --depth 2 --heads 2 --mlp 32 --lr 3e-3
         --warmup-epochs 0.5 --threads 2 --quiet --mixup 0.2 --cutmix 1.0 --erase 0.25)

execute_process(COMMAND "${APP}" ${tiny} --out "${OUT}/full" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "vit (2 epochs) exited with ${rc}")
endif()
file(READ "${OUT}/full/metrics.json" full)
string(JSON epochs GET "${full}" epochs_run)
string(JSON final GET "${full}" final_test_accuracy)
string(JSON best GET "${full}" best_test_accuracy)
string(JSON ips GET "${full}" images_per_second)
string(JSON seconds GET "${full}" train_seconds)
string(JSON curve LENGTH "${full}" per_epoch test_accuracy)
string(JSON finished GET "${full}" finished)
if(NOT epochs EQUAL 2 OR NOT curve EQUAL 2 OR NOT finished STREQUAL "ON")
  message(FATAL_ERROR "expected 2 finished epochs: ${full}")
endif()
if(final LESS 0 OR final GREATER 1 OR best LESS final OR NOT ips GREATER 0 OR NOT seconds GREATER 0)
  message(FATAL_ERROR "bad figures in metrics.json: ${full}")
endif()
foreach(png loss accuracy confusion attention)
  if(NOT EXISTS "${OUT}/full/${png}.png")
    message(FATAL_ERROR "no ${png}.png")
  endif()
  file(READ "${OUT}/full/${png}.png" sig LIMIT 8 HEX)
  if(NOT sig STREQUAL "89504e470d0a1a0a")
    message(FATAL_ERROR "${png}.png is not a PNG (starts ${sig})")
  endif()
endforeach()
foreach(f checkpoint.safetensors model.safetensors)
  if(NOT EXISTS "${OUT}/full/${f}")
    message(FATAL_ERROR "no ${f}")
  endif()
endforeach()

# Stop after epoch 1, resume: the same per-epoch losses and accuracies and
# the same final weights as the uninterrupted run.
execute_process(COMMAND "${APP}" ${tiny} --out "${OUT}/part" --stop-after 1 RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "vit --stop-after 1 exited with ${rc}")
endif()
execute_process(COMMAND "${APP}" --resume "${OUT}/part/checkpoint.safetensors" --data-dir "${OUT}/data" --threads 2
                        --quiet --out "${OUT}/part" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "vit --resume exited with ${rc}")
endif()
check_resumed_equals_uninterrupted("${OUT}/full" "${OUT}/part" "resumed run")

# --eval-only reproduces the recorded accuracy.
execute_process(COMMAND "${APP}" --eval-only --weights "${OUT}/full/model.safetensors" --data-dir "${OUT}/data"
                        --quiet --out "${OUT}/eval" RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "vit --eval-only exited with ${rc}")
endif()
file(READ "${OUT}/eval/eval.json" ev)
string(JSON acc GET "${ev}" test_accuracy)
if(NOT acc EQUAL final)
  message(FATAL_ERROR "--eval-only accuracy ${acc} differs from the recorded ${final}")
endif()

# Bad values: a clear message and exit code 2; a missing data set: code 1.
foreach(bad "--device;tpu" "--patch-size;5" "--heads;3" "--data;svhn" "--epochs;0" "--eval-only")
  execute_process(COMMAND "${APP}" ${bad} --data-dir "${OUT}/data" --out "${OUT}/bad" RESULT_VARIABLE rc
                  OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 2 OR err STREQUAL "")
    message(FATAL_ERROR "vit ${bad} exited with ${rc} (expected 2 and a message): ${err}")
  endif()
endforeach()
# --device cuda trains where there is a GPU; here (a build without the
# backend, or no device) it must fail clearly with exit code 1, not crash.
execute_process(COMMAND "${APP}" ${tiny} --device cuda --out "${OUT}/cuda" RESULT_VARIABLE rc OUTPUT_QUIET
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0 AND NOT (rc EQUAL 1 AND err MATCHES "no CUDA device available|no cuda backend"))
  message(FATAL_ERROR "vit --device cuda: exit ${rc}, message: ${err}")
endif()
execute_process(COMMAND "${APP}" --data-dir "${OUT}/nowhere" --out "${OUT}/bad" RESULT_VARIABLE rc OUTPUT_QUIET
                ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "train-images-idx3-ubyte")
  message(FATAL_ERROR "a missing data set: exit ${rc}, message: ${err}")
endif()
