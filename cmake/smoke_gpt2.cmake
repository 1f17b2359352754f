# CTest smoke run (cmake -P) of the GPT demo's GPT-2 path, offline: a tiny
# GPT-2-format tokenizer (tests/fixtures/gpt2_tiny_tokenizer: the 256 byte
# tokens, 40 merges, <|endoftext|>) and a tiny --init model fine-tune a few
# steps on a generated text with BPE tokens; the Hugging Face directory it
# writes is read back by --hf ... --generate (KV cache) and fine-tuned
# again; a fine-tune from --init and one from --hf, stopped half-way and
# resumed, end where the uninterrupted ones did; --device refuses what this
# build cannot run; the character-level path runs and resumes in bf16; bad
# invocations end in one line with the expected exit code.
# Variables: APP (the executable), TOKENIZER (the fixture directory), TINY
# (tests/fixtures/gpt2_tiny, a 96-token HF model), OUT (a scratch directory).
include(${CMAKE_CURRENT_LIST_DIR}/smoke_gpt_common.cmake)
set(GPT_SMOKE_FLAGS --threads 1 --quiet)
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}/empty")
set(text "")
foreach(i RANGE 1 40)
  string(APPEND text "to be, or not to be, that is the question ${i}: whether tis nobler in the mind to suffer.\n")
endforeach()
file(WRITE "${OUT}/corpus.txt" "${text}")

set(small --layers 2 --heads 2 --width 16 --context 16 --batch-size 2 --iters 4 --eval-interval 2 --eval-iters 2
          --sample-tokens 12)
run_ok(--init gpt2-124m ${small} --data "${OUT}/corpus.txt" --tokenizer-dir "${TOKENIZER}" --out "${OUT}/a")
file(READ "${OUT}/a/metrics.json" ma)
string(JSON val_a GET "${ma}" final_val_loss)
string(JSON vocab GET "${ma}" vocab_size)
string(JSON curve LENGTH "${ma}" val_loss)
string(JSON tokenizer GET "${ma}" configuration tokenizer)
if(NOT vocab EQUAL 297 OR NOT curve EQUAL 2 OR NOT tokenizer STREQUAL "gpt2" OR val_a MATCHES "nan|inf|null"
   OR val_a LESS_EQUAL 0)
  message(FATAL_ERROR "bad metrics.json of the --init run: ${ma}")
endif()
foreach(f hf/config.json hf/model.safetensors hf/vocab.json hf/merges.txt samples.txt)
  if(NOT EXISTS "${OUT}/a/${f}")
    message(FATAL_ERROR "no ${f} after the --init run")
  endif()
endforeach()
check_pngs("${OUT}/a" loss.png)
file(READ "${OUT}/a/hf/config.json" cfg)
string(JSON n_layer GET "${cfg}" n_layer)
string(JSON n_positions GET "${cfg}" n_positions)
if(NOT n_layer EQUAL 2 OR NOT n_positions EQUAL 16)
  message(FATAL_ERROR "hf/config.json: ${cfg}")
endif()

# The directory read back: generation with the cache (its tokenizer files found beside the weights).
run_ok(--hf "${OUT}/a/hf" --generate --prompt "to be" --max-new-tokens 8 --seed 3)
if(NOT run_out MATCHES "^to be" OR NOT run_err MATCHES "8 tokens in .* tokens/s")
  message(FATAL_ERROR "--hf --generate printed '${run_out}', '${run_err}'")
endif()
run_ok(--hf "${OUT}/a/hf" --generate --temperature 0.7 --top-k 20 --top-p 0.9 --max-new-tokens 8 --precision bf16)
# ... and fine-tuned again from it, in bf16.
run_ok(--hf "${OUT}/a/hf" --data "${OUT}/corpus.txt" --context 16 --batch-size 2 --iters 2 --eval-interval 0
       --eval-iters 1 --sample-tokens 4 --precision bf16 --out "${OUT}/b")
if(NOT EXISTS "${OUT}/b/hf/model.safetensors")
  message(FATAL_ERROR "no hf/model.safetensors after fine-tuning --hf")
endif()

# Stopped and resumed (model, AdamW, schedule, the batches' position): the same curves, sample and weights,
# from --init (with dropout: the dropout stream resumes too) and from --hf.
set(init --init gpt2-124m ${small} --dropout 0.1 --data "${OUT}/corpus.txt" --tokenizer-dir "${TOKENIZER}")
run_ok(${init} --out "${OUT}/r1")
run_ok(${init} --out "${OUT}/r2" --stop-after 1)
run_ok(--resume "${OUT}/r2/checkpoint.safetensors" --out "${OUT}/r2")
check_resumed_same("${OUT}/r1" "${OUT}/r2" hf/model.safetensors "--init")
set(hf --hf "${OUT}/a/hf" --data "${OUT}/corpus.txt" --context 16 --batch-size 2 --iters 4 --eval-interval 2
       --eval-iters 1 --sample-tokens 4)
run_ok(${hf} --out "${OUT}/r3")
run_ok(${hf} --out "${OUT}/r4" --stop-after 3)
run_ok(--resume "${OUT}/r4/checkpoint.safetensors" --out "${OUT}/r4")
check_resumed_same("${OUT}/r3" "${OUT}/r4" hf/model.safetensors "--hf")
# --device cuda: runs where this build has the backend and a GPU, else one line naming the flag, exit 2.
foreach(path "--init;gpt2-124m;--layers;1;--width;16;--heads;2;--context;8;--tokenizer-dir;${TOKENIZER}" "--layers;1")
  execute_process(COMMAND "${APP}" ${path} --data "${OUT}/corpus.txt" --device cuda --check --quiet --out "${OUT}/dev"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 0 AND (NOT rc EQUAL 2 OR NOT err MATCHES "^gpt: --device cuda: [^\n]*\n$"))
    message(FATAL_ERROR "gpt ${path} --device cuda: exit ${rc}, ${err}")
  endif()
endforeach()

# The character-level path in bf16 autocast, stopped and resumed in it (the precision is in the checkpoint).
set(char --data "${OUT}/corpus.txt" --layers 1 --heads 2 --width 16 --context 16 --batch-size 2 --iters 4
         --eval-interval 2 --eval-iters 1 --sample-tokens 4 --precision bf16)
run_ok(${char} --out "${OUT}/c")
run_ok(${char} --out "${OUT}/d" --stop-after 2)
run_ok(--resume "${OUT}/d/checkpoint.safetensors" --out "${OUT}/d")
file(READ "${OUT}/c/metrics.json" mc)
file(READ "${OUT}/d/metrics.json" md)
string(JSON vc GET "${mc}" final_val_loss)
string(JSON vd GET "${md}" final_val_loss)
string(JSON pc GET "${mc}" configuration precision)
string(JSON pd GET "${md}" configuration precision)
if(NOT pc STREQUAL "bf16" OR NOT pd STREQUAL "bf16" OR NOT vc STREQUAL vd OR vc MATCHES "nan|inf|null")
  message(FATAL_ERROR "char-level bf16: ${vc} (${pc}) against resumed ${vd} (${pd})")
endif()

# Bad invocations: one line on stderr, exit 1 for files, 2 for flags ("code|arg,arg,...").
set(cases
    "1|--hf,${OUT}/missing,--generate" "1|--hf,${OUT}/missing,--data,${OUT}/corpus.txt"
    "1|--hf,${OUT}/empty,--generate,--tokenizer-dir,${TOKENIZER}"
    "1|--hf,${OUT}/a/hf,--generate,--tokenizer-dir,${OUT}/empty"
    "1|--init,gpt2-124m,--layers,1,--width,16,--heads,2,--context,8,--data,${OUT}/corpus.txt,--tokenizer-dir,${OUT}/empty"
    "1|--hf,${TINY},--generate,--tokenizer-dir,${TOKENIZER}"
    "2|--init,gpt2-9b" "2|--init,gpt2-124m,--hf,${OUT}/a/hf" "2|--hf,${OUT}/a/hf,--tokenizer,char"
    "2|--hf,${OUT}/a/hf,--resume,${OUT}/a/metrics.json" "2|--precision,fp16" "2|--tokenizer-dir,${TOKENIZER}"
    "2|--init,gpt2-124m,--generate" "2|--resume,${OUT}/r2/checkpoint.safetensors,--hf,${OUT}/a/hf"
    "2|--resume,${OUT}/r2/checkpoint.safetensors,--init,gpt2-124m"
    "2|--resume,${OUT}/r2/checkpoint.safetensors,--tokenizer,char" "2|--device,tpu" "2|--device,cuda:x"
    "1|--tokenizer,gpt2,--resume,${OUT}/d/checkpoint.safetensors,--tokenizer-dir,${TOKENIZER}"
    "1|--resume,${OUT}/r2/checkpoint.safetensors,--tokenizer-dir,${OUT}/empty")
check_bad_invocations("${cases}" --out "${OUT}/bad")
