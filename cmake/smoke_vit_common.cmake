# What the ViT smoke runs (smoke_vit.cmake, smoke_vit_distributed.cmake)
# share: a fresh scratch directory with the tiny data set, and the check
# that a run stopped and resumed equals the uninterrupted one, in its
# per-epoch figures and, bit for bit, in its final weights.

# Empties OUT and writes the data set into OUT/data (MAKE_DATA).
function(make_smoke_data)
  file(REMOVE_RECURSE "${OUT}")
  execute_process(COMMAND "${MAKE_DATA}" "${OUT}/data" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "make_vit_smoke_data exited with ${rc}")
  endif()
endfunction()

function(check_resumed_equals_uninterrupted full_dir part_dir what)
  file(READ "${full_dir}/metrics.json" full)
  file(READ "${part_dir}/metrics.json" part)
  foreach(key train_loss test_loss test_accuracy lr)
    string(JSON a GET "${full}" per_epoch ${key})
    string(JSON b GET "${part}" per_epoch ${key})
    if(NOT a STREQUAL b)
      message(FATAL_ERROR "${what} differs in ${key}: ${b} vs uninterrupted ${a}")
    endif()
  endforeach()
  file(SHA256 "${full_dir}/model.safetensors" h_full)
  file(SHA256 "${part_dir}/model.safetensors" h_part)
  if(NOT h_full STREQUAL h_part)
    message(FATAL_ERROR "${what}'s weights differ from the uninterrupted run's")
  endif()
endfunction()
