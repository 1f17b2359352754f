# The C++ code blocks of README.md and docs/*.md as sources the build
# compiles (tests/CMakeLists.txt, CTest doc_examples), so an example a reader
# copies cannot stop compiling unnoticed.
#
#   ember_doc_examples(<out dir> <fragments var> <programs var> <markdown file>...)
#
# Every ```cpp block is one of:
#   - a program: it has `int main(`; written to its own .cpp, built and run
#     (it must exit with 0);
#   - a fragment, marked by an HTML comment right before the fence, which a
#     rendered page does not show:
#       <!-- fragment -->          statements, compiled as a function's body
#       <!-- fragment: file -->    declarations, compiled at namespace scope
#     The comment may hold lines of hidden set-up (the tensors a snippet
#     names), placed before the block:
#       <!-- fragment
#       Tensor x = randn({4, 8});
#       -->
#     Each document's fragments go into one .cpp (one compile per document),
#     each in a namespace of its own, after #include <ember/ember.h> and
#     `using namespace ember;`; a block's own #include lines move to the top.
#     Fragments are compiled and linked, not run.
#   - <!-- not compiled: why -->   an excerpt that cannot stand alone (code
#     with `...` elisions, Ember's internals); the reason is required.
# A block that is none of these is a configure error naming its file and
# line. `#line` directives make the compiler's messages name the document's
# own lines. The documents are configure dependencies: editing one re-runs
# this at the next build.

# Lines of text as a list that survives C++: `;`, `[`, `]` would split or
# join CMake list elements, so they travel as placeholders.
function(_ember_doc_lines text out)
  string(REPLACE ";" "@EMBER_SEMI@" text "${text}")
  string(REPLACE "[" "@EMBER_LB@" text "${text}")
  string(REPLACE "]" "@EMBER_RB@" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()

function(_ember_doc_restore var)
  string(REPLACE "@EMBER_SEMI@" ";" s "${${var}}")
  string(REPLACE "@EMBER_LB@" "[" s "${s}")
  string(REPLACE "@EMBER_RB@" "]" s "${s}")
  set(${var} "${s}" PARENT_SCOPE)
endfunction()

# Writes a file only when its text changed, so a configure run rebuilds nothing else.
function(_ember_doc_write path text)
  if(EXISTS ${path})
    file(READ ${path} old)
    if(old STREQUAL text)
      return()
    endif()
  endif()
  file(WRITE ${path} "${text}")
endfunction()

function(ember_doc_examples out fragments_var programs_var)
  file(MAKE_DIRECTORY ${out})
  set(fragment_sources)
  set(program_sources)
  foreach(md ${ARGN})
    if(NOT CMAKE_SCRIPT_MODE_FILE)
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${md})
    endif()
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${md})
    string(MAKE_C_IDENTIFIER "${rel}" stem)
    file(READ ${md} text)
    _ember_doc_lines("${text}" lines)

    set(n 0)
    set(state text)  # text, comment (a marker's set-up lines), block
    set(marker "")
    set(setup "")
    set(setup_line 0)
    set(includes "")
    set(body "")
    foreach(line IN LISTS lines)
      math(EXPR n "${n} + 1")
      if(state STREQUAL "block")
        if(line MATCHES "^[ \t]*```[ \t]*$")
          set(state text)
          _ember_doc_emit()
        else()
          string(LENGTH "${line}" len)
          if(len GREATER_EQUAL indent)
            string(SUBSTRING "${line}" ${indent} -1 line)
          endif()
          string(APPEND block "${line}\n")
        endif()
      elseif(state STREQUAL "comment")
        if(line MATCHES "-->")
          set(state text)
        else()
          string(APPEND setup "${line}\n")
        endif()
      elseif(line MATCHES "^[ \t]*<!-- (fragment: file|fragment|not compiled)(.*)$")
        set(marker "${CMAKE_MATCH_1}")
        set(rest "${CMAKE_MATCH_2}")
        set(setup "")
        math(EXPR setup_line "${n} + 1")
        if(marker STREQUAL "not compiled" AND NOT rest MATCHES "^: *[^ -]")
          message(FATAL_ERROR "${rel}:${n}: `<!-- not compiled: why -->` needs its reason")
        endif()
        if(NOT rest MATCHES "-->")
          set(state comment)
        endif()
      elseif(line MATCHES "^([ \t]*)```(cpp|c\\+\\+)[ \t]*$")
        string(LENGTH "${CMAKE_MATCH_1}" indent)
        set(state block)
        set(block "")
        set(block_line ${n})
      elseif(NOT line STREQUAL "")
        set(marker "")  # a marker applies to the fence right after it only
      endif()
    endforeach()
    if(NOT state STREQUAL "text")
      message(FATAL_ERROR "${rel}: a code block or marker comment is not closed")
    endif()

    if(NOT body STREQUAL "")
      set(tu "// Generated from ${rel} by cmake/doc_examples.cmake: its C++ fragments.\n")
      string(APPEND tu "#include <ember/ember.h>\n${includes}\nusing namespace ember;\n${body}")
      _ember_doc_restore(tu)
      _ember_doc_write(${out}/${stem}_fragments.cpp "${tu}")
      list(APPEND fragment_sources ${out}/${stem}_fragments.cpp)
    endif()
  endforeach()
  set(${fragments_var} ${fragment_sources} PARENT_SCOPE)
  set(${programs_var} ${program_sources} PARENT_SCOPE)
endfunction()

# One finished block (a macro: it reads and updates ember_doc_examples' state).
macro(_ember_doc_emit)
  math(EXPR first "${block_line} + 1")
  if(marker STREQUAL "not compiled")
    # Left out, with its reason beside it in the document.
  elseif(marker STREQUAL "")
    if(NOT block MATCHES "int main\\(")
      message(FATAL_ERROR "${rel}:${block_line}: this C++ block has no main() and is not marked: put "
                          "<!-- fragment -->, <!-- fragment: file --> or <!-- not compiled: why --> right "
                          "before its fence (cmake/doc_examples.cmake)")
    endif()
    set(program "#line ${first} \"${rel}\"\n${block}")
    _ember_doc_restore(program)
    _ember_doc_write(${out}/${stem}_${block_line}.cpp "${program}")
    list(APPEND program_sources ${out}/${stem}_${block_line}.cpp)
  else()
    # #include lines move to the file's top; a blank line keeps the numbering.
    _ember_doc_lines("${block}" block_lines)
    set(code "")
    foreach(l IN LISTS block_lines)
      if(l MATCHES "^[ \t]*#[ \t]*include")
        string(APPEND includes "${l}\n")
        string(APPEND code "\n")
      else()
        string(APPEND code "${l}\n")
      endif()
    endforeach()
    string(APPEND body "\nnamespace doc_${block_line} {\n")
    if(marker STREQUAL "fragment")
      string(APPEND body "[[maybe_unused]] void example() {\n")
    endif()
    if(NOT setup STREQUAL "")
      string(APPEND body "#line ${setup_line} \"${rel}\"\n${setup}")
    endif()
    string(APPEND body "#line ${first} \"${rel}\"\n${code}")
    if(marker STREQUAL "fragment")
      string(APPEND body "}\n")
    endif()
    string(APPEND body "}  // namespace doc_${block_line}\n")
  endif()
  set(marker "")
  set(setup "")
endmacro()
