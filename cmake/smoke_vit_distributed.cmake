# CTest smoke run (cmake -P) of the ViT demo data-parallel, on the tiny data
# set of the ViT smoke test: 2 processes under MPIEXEC train and rank 0 alone
# writes well-formed outputs that record the 2 processes; a 2-process run
# stopped after epoch 1 and resumed by 2 processes equals the uninterrupted
# one bit for bit; resuming it with another number of processes is refused;
# --distributed in a process started on its own (a world of one) trains
# exactly as without it. Variables: APP, MAKE_DATA, OUT (a scratch
# directory), MPIEXEC (the launcher command for 2 processes, a list).
include(${CMAKE_CURRENT_LIST_DIR}/smoke_vit_common.cmake)
make_smoke_data()
set(tiny --data-dir "${OUT}/data" --epochs 2 --batch-size 16 --width 16 --depth 2 --heads 2 --mlp 32 --lr 3e-3
         --warmup-epochs 0.5 --threads 1 --quiet)

function(vit out)
  execute_process(COMMAND ${ARGN} ${tiny} --out "${OUT}/${out}" RESULT_VARIABLE rc OUTPUT_VARIABLE stdout
                  ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "${cmd} (--out ${out}) exited with ${rc}:\n${stdout}\n${stderr}")
  endif()
endfunction()

vit(full ${MPIEXEC} "${APP}" --distributed)
file(READ "${OUT}/full/metrics.json" full)
string(JSON processes GET "${full}" processes)
string(JSON global GET "${full}" global_batch_size)
string(JSON epochs GET "${full}" epochs_run)
string(JSON finished GET "${full}" finished)
if(NOT processes EQUAL 2 OR NOT global EQUAL 32 OR NOT epochs EQUAL 2 OR NOT finished STREQUAL "ON")
  message(FATAL_ERROR "expected 2 finished epochs of 2 processes with 16 images each: ${full}")
endif()
foreach(f checkpoint.safetensors model.safetensors loss.png accuracy.png confusion.png attention.png)
  if(NOT EXISTS "${OUT}/full/${f}")
    message(FATAL_ERROR "the 2-process run wrote no ${f}")
  endif()
endforeach()

# Stopped after epoch 1 and resumed by 2 processes: the same run.
vit(part ${MPIEXEC} "${APP}" --distributed --stop-after 1)
execute_process(COMMAND ${MPIEXEC} "${APP}" --distributed --resume "${OUT}/part/checkpoint.safetensors" --data-dir
                        "${OUT}/data" --threads 1 --quiet --out "${OUT}/part" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "vit --distributed --resume exited with ${rc}")
endif()
check_resumed_equals_uninterrupted("${OUT}/full" "${OUT}/part" "the resumed 2-process run")

# One process cannot continue a 2-process run (its shards and schedule differ).
execute_process(COMMAND "${APP}" --resume "${OUT}/part/checkpoint.safetensors" --data-dir "${OUT}/data" --quiet
                        --out "${OUT}/bad" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "written by a run of 2 process")
  message(FATAL_ERROR "resuming a 2-process checkpoint in 1 process: exit ${rc}, message: ${err}")
endif()

# --distributed without a launcher: a world of one, the very same training.
vit(single "${APP}")
vit(single_distributed "${APP}" --distributed)
file(SHA256 "${OUT}/single/model.safetensors" h_single)
file(SHA256 "${OUT}/single_distributed/model.safetensors" h_single_distributed)
if(NOT h_single STREQUAL h_single_distributed)
  message(FATAL_ERROR "--distributed in a world of one changed the trained weights")
endif()
