# CTest check (cmake -P): README.md must show apps/readme_example/main.cpp
# verbatim, so the example readers copy is the one `make test` compiles and runs.
file(READ "${README}" readme)
file(READ "${SOURCE}" source)
string(FIND "${readme}" "```cpp\n${source}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not contain ${SOURCE} verbatim in a ```cpp block; copy it over")
endif()
