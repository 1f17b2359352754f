# CTest check (cmake -P): a run whose loss becomes non-finite (learning rate
# 1e12) stops with a clear message and exit code 1, and leaves the previous
# run's model.safetensors untouched; with EMBER_DETECT_ANOMALY=1 the message
# names the op. Variables: APP, OUT.
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
file(WRITE "${OUT}/model.safetensors" "the previous run's checkpoint")
execute_process(COMMAND "${APP}" --model transformer --epochs 3 --lr 1e12 --quiet --out "${OUT}"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "the training loss became -?nan at epoch 1.*nothing was saved")
  message(FATAL_ERROR "expected exit 1 and a non-finite loss message, got ${rc}: ${err}")
endif()
file(READ "${OUT}/model.safetensors" kept)
if(NOT kept STREQUAL "the previous run's checkpoint")
  message(FATAL_ERROR "model.safetensors was overwritten by the failed run")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env EMBER_DETECT_ANOMALY=1
                        "${APP}" --model transformer --epochs 3 --lr 1e12 --quiet --out "${OUT}"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "anomaly mode: kernel '[a-z_]+' produced a non-finite value")
  message(FATAL_ERROR "expected the anomaly mode to name the op, got ${rc}: ${err}")
endif()
