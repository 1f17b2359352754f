// The ONNX layer links and its op table builds.
#include <doctest/doctest.h>

#include <ember/onnx/import_ops.h>

TEST_CASE("onnx: the import op table builds") { CHECK(ember::onnx::detail::op_table().size() >= 0u); }
