# CTest smoke run (cmake -P) of the DeiT recipe's teacher-student path
# (`make vit-recipe-distill`) on the tiny generated data set: the CNN
# teacher (CNN) trains and writes its safetensors file; the ViT student (APP)
# distils from it (hard, then soft) with RandAugment, DropPath, EMA and bf16
# autocast; metrics.json holds the student's, the teacher's and the EMA's
# figures; --ema leaves the raw model's training unchanged; a teacher file of
# another kind is refused with exit 2.
# Variables: APP (vit), CNN, MAKE_DATA, OUT (a scratch directory).
include(${CMAKE_CURRENT_LIST_DIR}/smoke_vit_common.cmake)
make_smoke_data()
execute_process(COMMAND "${CNN}" --data-dir "${OUT}/data" --epochs 1 --batch-size 32 --widths 4,8 --blocks 1,1
                        --threads 2 --quiet --out "${OUT}/teacher" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT EXISTS "${OUT}/teacher/model.safetensors")
  message(FATAL_ERROR "cnn (teacher) exited with ${rc}")
endif()
file(READ "${OUT}/teacher/metrics.json" tm)
string(JSON teacher_acc GET "${tm}" final_test_accuracy)
string(JSON teacher_secs GET "${tm}" train_seconds)

set(base --data-dir "${OUT}/data" --epochs 1 --batch-size 32 --width 16 --depth 2 --heads 2 --mlp 32 --threads 2
         --quiet --randaugment 2,9 --drop-path 0.1 --ema 0.9)
set(tiny ${base} --teacher "${OUT}/teacher/model.safetensors")
foreach(variant "hard;bf16" "soft;fp32")
  list(GET variant 0 distill)
  list(GET variant 1 precision)
  set(out "${OUT}/student_${distill}")
  execute_process(COMMAND "${APP}" ${tiny} --distill ${distill} --distill-temperature 2 --precision ${precision}
                          --out "${out}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "vit --distill ${distill} --precision ${precision} exited with ${rc}")
  endif()
  file(READ "${out}/metrics.json" m)
  string(JSON final GET "${m}" final_test_accuracy)
  string(JSON secs GET "${m}" train_seconds)
  string(JSON student_secs GET "${m}" student_train_seconds)
  string(JSON t_secs GET "${m}" teacher_train_seconds)
  string(JSON t_acc GET "${m}" teacher_test_accuracy)
  string(JSON ema GET "${m}" ema_final_test_accuracy)
  string(JSON prec GET "${m}" precision)
  if(final LESS 0 OR final GREATER 1 OR ema LESS 0 OR ema GREATER 1 OR NOT prec STREQUAL precision)
    message(FATAL_ERROR "bad figures in ${out}/metrics.json: ${m}")
  endif()
  if(NOT t_acc EQUAL teacher_acc OR NOT t_secs EQUAL teacher_secs OR NOT secs GREATER student_secs)
    message(FATAL_ERROR "${out}/metrics.json does not count the teacher (${teacher_acc}, ${teacher_secs} s): ${m}")
  endif()
  foreach(f model.safetensors model_ema.safetensors attention.png)
    if(NOT EXISTS "${out}/${f}")
      message(FATAL_ERROR "no ${out}/${f}")
    endif()
  endforeach()
endforeach()
# --ema only observes: building the averaged copy (and loading a teacher)
# draws no numbers from the run's generator, so the raw model trains
# exactly as without it (DropPath and RandAugment make any drift visible).
set(plain --data-dir "${OUT}/data" --epochs 2 --batch-size 32 --width 16 --depth 2 --heads 2 --mlp 32 --threads 2
          --quiet --randaugment 2,9 --drop-path 0.1)
set(extra_plain)
set(extra_ema --ema 0.9)
foreach(variant plain ema)
  execute_process(COMMAND "${APP}" ${plain} ${extra_${variant}} --out "${OUT}/${variant}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "vit (${variant}) exited with ${rc}")
  endif()
  file(READ "${OUT}/${variant}/metrics.json" m)
  string(JSON loss_${variant} GET "${m}" final_test_loss)
endforeach()
if(NOT loss_plain STREQUAL loss_ema)
  message(FATAL_ERROR "--ema changed the raw model's training: test loss ${loss_ema}, without it ${loss_plain}")
endif()
# The distilled model scores with the two heads' average.
execute_process(COMMAND "${APP}" --eval-only --weights "${OUT}/student_hard/model.safetensors" --data-dir "${OUT}/data"
                        --threads 2 --quiet --out "${OUT}/eval" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "vit --eval-only of the distilled student exited with ${rc}")
endif()
# A ViT's model file is not a teacher: a usage error naming it.
execute_process(COMMAND "${APP}" ${base} --distill hard --out "${OUT}/bad"
                        --teacher "${OUT}/student_hard/model.safetensors" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "not a CNN teacher file")
  message(FATAL_ERROR "a ViT file as --teacher: exit ${rc}, ${err}")
endif()
