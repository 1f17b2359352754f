# CTest (cmake -P): one demo's --export-onnx, checked against onnxruntime.
# For the app NAME: a tiny training run that exports its final model, and an
# --eval-only (or, for GPT-2, a fine-tune) of the saved model that exports
# it again, each with --export-onnx-check, which writes the app's real batch
# (FILE.inputs.safetensors) and Ember's outputs for it
# (FILE.expected.safetensors) beside FILE. onnxruntime runs FILE on that
# batch (node tools/onnx_run.js, npm's onnxruntime-node) and
# compare_safetensors holds its outputs to Ember's within 1e-5 absolute. The
# batch differs from the traced example in every dynamic axis, so the graph
# is also run at sizes it was not traced at. Then the refusals: a model that
# does not export, one line and exit 2.
#
# Variables: APP, NAME (vit, cnn, gpt, seq2seq, attention_regression), OUT
# (a scratch directory), MAKE_DATA (writes the tiny image data set), COMPARE
# (compare_safetensors), NODE, ONNX_RUN (tools/onnx_run.js), NPM_DIR (where
# onnxruntime-node is), GPT2_TOKENIZER (the tiny GPT-2 tokenizer fixture).
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
set(ENV{EMBER_NPM_DIR} "${NPM_DIR}")
set(atol 1e-5)

# APP ARGN must exit 0; its stdout is kept in run_out.
function(run_ok)
  execute_process(COMMAND "${APP}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  string(REPLACE ";" " " shown "${ARGN}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NAME} ${shown}: exit ${rc}: ${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
endfunction()

# FILE (written with --export-onnx-check) run by onnxruntime on its batch and
# compared with Ember's outputs; `expect` is what the app's line must say.
function(check_export file expect)
  string(REGEX REPLACE "([][+.*()^$?|\\])" "\\\\\\1" file_re "${file}")
  if(NOT run_out MATCHES "exported ${expect} to ${file_re} \\(ONNX opset 17")
    message(FATAL_ERROR "${NAME}: the export line does not say '${expect} to ${file}': ${run_out}")
  endif()
  foreach(f "${file}" "${file}.inputs.safetensors" "${file}.expected.safetensors")
    if(NOT EXISTS "${f}")
      message(FATAL_ERROR "${NAME}: no ${f}")
    endif()
  endforeach()
  execute_process(COMMAND "${NODE}" "${ONNX_RUN}" --int64 "${file}" "${file}.inputs.safetensors"
                          "${file}.onnxruntime.safetensors" RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NAME}: onnxruntime on ${file}: exit ${rc}: ${err} (node and onnxruntime-node: scripts/setup.sh)")
  endif()
  execute_process(COMMAND "${COMPARE}" "${file}.expected.safetensors" "${file}.onnxruntime.safetensors" ${atol}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE cmp ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NAME}: ${file}: onnxruntime's outputs differ from Ember's:\n${cmp}${err}")
  endif()
  message(STATUS "${NAME}: ${file} in onnxruntime against Ember:\n${cmp}")
endfunction()

# APP ARGN must refuse with exit `code` and one line on stderr matching `why`.
function(run_refused code why)
  execute_process(COMMAND "${APP}" ${ARGN} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 120)
  string(STRIP "${err}" err)
  string(REPLACE ";" " " shown "${ARGN}")
  if(NOT rc EQUAL code OR NOT err MATCHES "${why}" OR err MATCHES "\n")
    message(FATAL_ERROR "${NAME} ${shown}: expected exit ${code} and one line matching '${why}', got ${rc}: ${err}")
  endif()
endfunction()

if(NAME STREQUAL "vit" OR NAME STREQUAL "cnn")
  execute_process(COMMAND "${MAKE_DATA}" "${OUT}/data" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${MAKE_DATA} exited with ${rc}")
  endif()
endif()

set(common --threads 2 --quiet --export-onnx-check)
if(NAME STREQUAL "vit")
  # A hybrid ViT (conv stem, patches, attention, GELU, layer norm) with a distillation head, so that every
  # part of the demo's model is in the graph.
  run_ok(--data-dir "${OUT}/data" --epochs 1 --batch-size 32 --width 16 --depth 2 --heads 2 --mlp 32 --hybrid 4
         --out "${OUT}/run" --export-onnx "${OUT}/run/vit.onnx" ${common})
  check_export("${OUT}/run/vit.onnx" "images\\[batch,1,28,28\\] -> logits")
  run_ok(--eval-only --weights "${OUT}/run/model.safetensors" --data-dir "${OUT}/data" --out "${OUT}/eval"
         --export-onnx "${OUT}/eval/vit.onnx" ${common})
  check_export("${OUT}/eval/vit.onnx" "images\\[batch,1,28,28\\] -> logits")
elseif(NAME STREQUAL "cnn")
  run_ok(--data-dir "${OUT}/data" --epochs 1 --batch-size 32 --widths 4,8 --blocks 1,1 --out "${OUT}/run"
         --export-onnx "${OUT}/run/cnn.onnx" ${common})
  check_export("${OUT}/run/cnn.onnx" "images\\[batch,1,28,28\\] -> logits")
  run_ok(--eval-only --weights "${OUT}/run/model.safetensors" --data-dir "${OUT}/data" --out "${OUT}/eval"
         --export-onnx "${OUT}/eval/cnn.onnx" ${common})
  check_export("${OUT}/eval/cnn.onnx" "images\\[batch,1,28,28\\] -> logits")
elseif(NAME STREQUAL "gpt")
  set(text "")
  foreach(i RANGE 1 40)
    string(APPEND text "to be, or not to be, that is the question ${i}: whether tis nobler in the mind to suffer.\n")
  endforeach()
  file(WRITE "${OUT}/corpus.txt" "${text}")
  set(small --layers 2 --heads 2 --width 16 --context 16 --batch-size 4 --iters 6 --eval-interval 0 --eval-iters 1
            --sample-tokens 8 --data "${OUT}/corpus.txt")
  run_ok(${small} --out "${OUT}/run" --export-onnx "${OUT}/run/gpt.onnx" ${common})
  check_export("${OUT}/run/gpt.onnx" "tokens\\[batch,sequence\\] -> logits")
  run_ok(--eval-only --weights "${OUT}/run/model.safetensors" --data "${OUT}/corpus.txt" --out "${OUT}/eval"
         --export-onnx "${OUT}/eval/gpt.onnx" ${common})
  check_export("${OUT}/eval/gpt.onnx" "tokens\\[batch,sequence\\] -> logits")
  # The GPT-2 path: a tiny GPT-2 shape (--init, the tanh GELU, tied head) trained on BPE tokens of the tiny
  # tokenizer fixture, then exported.
  run_ok(--init gpt2-124m --layers 2 --heads 2 --width 16 --context 16 --tokenizer-dir "${GPT2_TOKENIZER}"
         --data "${OUT}/corpus.txt" --batch-size 2 --iters 2 --eval-interval 0 --eval-iters 1 --sample-tokens 4
         --out "${OUT}/gpt2" --export-onnx "${OUT}/gpt2/gpt2.onnx" ${common})
  check_export("${OUT}/gpt2/gpt2.onnx" "tokens\\[batch,sequence\\] -> logits")
  run_refused(2 "--export-onnx is for training and --eval-only" --generate --weights "${OUT}/run/model.safetensors"
              --export-onnx "${OUT}/x.onnx")
elseif(NAME STREQUAL "seq2seq")
  set(small --train-size 200 --test-size 40 --epochs 1 --batch-size 32 --hidden 16 --heatmaps 0)
  run_ok(--model transformer ${small} --out "${OUT}/run" --export-onnx "${OUT}/run/seq2seq.onnx" ${common})
  set(io "source\\[batch,source_length\\], source_lengths\\[batch\\], target_prefix\\[batch,prefix_length\\] -> logits")
  check_export("${OUT}/run/seq2seq.onnx" "${io}")
  run_ok(--eval-only --weights "${OUT}/run/model.safetensors" --out "${OUT}/eval"
         --export-onnx "${OUT}/eval/seq2seq.onnx" ${common})
  check_export("${OUT}/eval/seq2seq.onnx" "${io}")
  # The GRU model does not export: refused before training, and from a saved file.
  run_refused(2 "--export-onnx.*GRU" ${small} --out "${OUT}/gru" --export-onnx "${OUT}/gru/x.onnx")
  run_ok(${small} --out "${OUT}/gru")
  run_refused(2 "--export-onnx.*GRU" --eval-only --weights "${OUT}/gru/model.safetensors" --out "${OUT}/gru"
              --export-onnx "${OUT}/gru/x.onnx")
elseif(NAME STREQUAL "attention_regression")
  foreach(model single-head transformer encoder)
    run_ok(--model ${model} --epochs 2 --out "${OUT}/${model}" --export-onnx "${OUT}/${model}/model.onnx" ${common})
    check_export("${OUT}/${model}/model.onnx" "x\\[batch,points\\] -> y")
    run_ok(--eval-only --weights "${OUT}/${model}/model.safetensors" --out "${OUT}/${model}_eval"
           --export-onnx "${OUT}/${model}_eval/model.onnx" ${common})
    check_export("${OUT}/${model}_eval/model.onnx" "x\\[batch,points\\] -> y")
  endforeach()
  run_refused(2 "--export-onnx.*nw" --model nw-param --out "${OUT}/nw" --export-onnx "${OUT}/nw/x.onnx")
else()
  message(FATAL_ERROR "onnx_export.cmake: no case for NAME '${NAME}'")
endif()
