// Broken and unsupported ONNX files: each class of bad file is refused at
// load time with one exception of the right type whose message names the
// file and what is wrong (truncated or garbage bytes, an unknown opset or
// domain, a cycle, a dangling input, absurd dims, an initializer whose data
// disagrees with its dims, an op Ember lacks), and a node that fails while
// running names itself.
#include <doctest/doctest.h>

#include <ember/ember.h>
#include <ember/onnx/onnx.h>

#include "onnx/onnx_builder.h"
#include "test_util.h"

using namespace ember;
using onnx_test::ModelBuilder;
using test::contains;
using test::error_of;
namespace TP = ::onnx;

namespace {

// y = relu(x + b): a valid model the broken ones are made from.
ModelBuilder small_model() {
  ModelBuilder m;
  m.input("x", {2, 3}).output("y").initializer("b", tensor({1.0, 2.0, 3.0}));
  m.node("Add", {"x", "b"}, {"s"}).node("Relu", {"s"}, {"y"});
  return m;
}

// The message of the E that loading the file `name` holding bytes throws; checks that it names the file.
template <class E>
std::string load_error(const std::string& name, const std::string& bytes) {
  const std::string path = ModelBuilder::write_file(name, bytes);
  const std::string msg = error_of<E>([&] { ember::onnx::load(path); });
  CHECK_MESSAGE(contains(msg, path), msg);
  return msg;
}

}  // namespace

TEST_CASE("onnx import errors: the valid model they start from loads and runs") {
  const std::string path = small_model().save("valid.onnx");
  auto m = ember::onnx::load(path);
  const Tensor y = m->forward(tensor({{-5.0, 0.0, 1.0}, {-1.0, -2.0, -3.0}}));
  test::check_close(y, {0, 2, 4, 0, 0, 0}, 0);
}

TEST_CASE("onnx import errors: a truncated file is an IOError naming it") {
  const std::string bytes = small_model().bytes();
  // Cut inside the graph: whatever the cut leaves, it is not a model.
  const std::string msg = load_error<IOError>("truncated.onnx", bytes.substr(0, bytes.size() * 2 / 3));
  CHECK_MESSAGE(contains(msg, "not an ONNX model"), msg);
}

TEST_CASE("onnx import errors: garbage and empty files are IOErrors (wrong magic)") {
  std::string garbage = "\x89PNG\r\n\x1a\n this is not protobuf at all \xff\xfe\xfd";
  CHECK(contains(load_error<IOError>("garbage.onnx", garbage), "wrong magic"));
  CHECK(contains(load_error<IOError>("empty.onnx", ""), "wrong magic"));
  // A valid protobuf message that is not a model: an empty ModelProto has no graph.
  CHECK(contains(load_error<IOError>("nograph.onnx", std::string("\x08\x07", 2)), "no graph"));
}

TEST_CASE("onnx import errors: a path that is not a regular file is an IOError") {
  const std::string missing = test::scratch_path("ember_onnx_import", "does_not_exist.onnx").string();
  CHECK(contains(error_of<IOError>([&] { ember::onnx::load(missing); }), "no such file"));
  const std::string dir = test::scratch_path("ember_onnx_import", "").string();
  CHECK(contains(error_of<IOError>([&] { ember::onnx::load(dir); }), "directory"));
}

TEST_CASE("onnx import errors: an unknown opset of the default domain is an IOError") {
  ModelBuilder m = small_model();
  m.proto().mutable_opset_import(0)->set_version(99);
  const std::string msg = load_error<IOError>("opset99.onnx", m.bytes());
  CHECK_MESSAGE(contains(msg, "opset 99"), msg);
  CHECK_MESSAGE(contains(msg, "1 to 17"), msg);
}

TEST_CASE("onnx import errors: a node of another domain is Unsupported naming the domain") {
  ModelBuilder m = small_model();
  auto* o = m.proto().add_opset_import();
  o->set_domain("ai.onnx.ml");
  o->set_version(3);
  m.node("Normalizer", {"y"}, {"z"}, {}, "norm");
  m.proto().mutable_graph()->mutable_node(2)->set_domain("ai.onnx.ml");
  const std::string msg = load_error<ember::onnx::Unsupported>("ml.onnx", m.bytes());
  CHECK_MESSAGE(contains(msg, "domain 'ai.onnx.ml'"), msg);
  CHECK_MESSAGE(contains(msg, "node 'norm'"), msg);
}

TEST_CASE("onnx import errors: a cycle among nodes is an IOError naming them") {
  ModelBuilder m;
  m.input("x", {2}).output("y");
  m.node("Add", {"x", "c"}, {"a"}, {}, "first").node("Relu", {"a"}, {"c"}, {}, "second");
  m.node("Neg", {"a"}, {"y"}, {}, "third");
  const std::string msg = load_error<IOError>("cycle.onnx", m.bytes());
  CHECK_MESSAGE(contains(msg, "cycle"), msg);
  CHECK_MESSAGE(contains(msg, "node 'first'"), msg);
  CHECK_MESSAGE(contains(msg, "node 'second'"), msg);
}

TEST_CASE("onnx import errors: a dangling input is an IOError naming the node and the value") {
  ModelBuilder m;
  m.input("x", {2}).output("y");
  m.node("Add", {"x", "nowhere"}, {"y"}, {}, "adder");
  const std::string msg = load_error<IOError>("dangling.onnx", m.bytes());
  CHECK_MESSAGE(contains(msg, "node 'adder'"), msg);
  CHECK_MESSAGE(contains(msg, "'nowhere'"), msg);
  CHECK_MESSAGE(contains(msg, "dangling"), msg);
}

TEST_CASE("onnx import errors: a graph output nothing produces is an IOError") {
  ModelBuilder m = small_model();
  m.output("ghost");
  CHECK(contains(load_error<IOError>("ghost.onnx", m.bytes()), "'ghost' is not produced"));
}

TEST_CASE("onnx import errors: absurd dims are IOErrors before anything is allocated") {
  SUBCASE("a negative dim") {
    ModelBuilder m = small_model();
    m.proto().mutable_graph()->mutable_initializer(0)->set_dims(0, -3);
    CHECK(contains(load_error<IOError>("negdim.onnx", m.bytes()), "negative dim (-3)"));
  }
  SUBCASE("a product of dims beyond any memory") {
    ModelBuilder m = small_model();
    auto* t = m.proto().mutable_graph()->mutable_initializer(0);
    t->clear_dims();
    for (int i = 0; i < 4; ++i) t->add_dims(int64_t{1} << 20);
    CHECK(contains(load_error<IOError>("huge.onnx", m.bytes()), "more elements than any memory holds"));
  }
  SUBCASE("a negative dim declared for a graph input") {
    ModelBuilder m = small_model();
    m.proto()
        .mutable_graph()
        ->mutable_input(0)
        ->mutable_type()
        ->mutable_tensor_type()
        ->mutable_shape()
        ->mutable_dim(0)
        ->set_dim_value(-1);
    CHECK(contains(load_error<IOError>("neginput.onnx", m.bytes()), "negative dim"));
  }
}

TEST_CASE("onnx import errors: an initializer with more or less data than its dims is an IOError") {
  SUBCASE("dims claim more than the raw data holds") {
    ModelBuilder m = small_model();
    m.proto().mutable_graph()->mutable_initializer(0)->set_dims(0, 6);
    const std::string msg = load_error<IOError>("short.onnx", m.bytes());
    CHECK_MESSAGE(contains(msg, "initializer 'b'"), msg);
    CHECK_MESSAGE(contains(msg, "holds 3 values but the dims say 6"), msg);
  }
  SUBCASE("typed data longer than the dims") {
    ModelBuilder m = small_model();
    auto* t = m.proto().mutable_graph()->mutable_initializer(0);
    t->clear_raw_data();
    for (int i = 0; i < 5; ++i) t->add_float_data(1.0f);
    CHECK(contains(load_error<IOError>("long.onnx", m.bytes()), "float_data holds 5 values but the dims say 3"));
  }
  SUBCASE("a claim of 2^39 elements with no data is refused without allocating them") {
    ModelBuilder m = small_model();
    auto* t = m.proto().mutable_graph()->mutable_initializer(0);
    t->set_dims(0, int64_t{1} << 39);
    CHECK(contains(load_error<IOError>("claim.onnx", m.bytes()), "holds 3 values"));
  }
}

TEST_CASE("onnx import errors: ops Ember lacks are Unsupported at load time, all of them named") {
  ModelBuilder m = small_model();
  m.node("TfIdfVectorizer", {"y"}, {"z"}).node("StringNormalizer", {"z"}, {"w"});
  const std::string msg = load_error<ember::onnx::Unsupported>("unsupported.onnx", m.bytes());
  CHECK_MESSAGE(contains(msg, "StringNormalizer, TfIdfVectorizer"), msg);
}

TEST_CASE("onnx import errors: the ONNX checker's objections are IOErrors") {
  // A node output named twice is caught by the reader; a missing required attribute by the checker.
  ModelBuilder m;
  m.input("x", {2, 3}).output("y");
  m.node("Cast", {"x"}, {"y"});  // Cast requires 'to'
  const std::string msg = load_error<IOError>("checker.onnx", m.bytes());
  CHECK_MESSAGE(contains(msg, "checker"), msg);
}

TEST_CASE("onnx import errors: a node failing while running names itself, keeping the error's type") {
  ModelBuilder m;
  m.input("x", {2, 3}).input("z", {4}).output("y");
  m.node("Add", {"x", "z"}, {"y"}, {}, "bad_add");
  auto model = ember::onnx::load_from_bytes(m.bytes(), "shapes.onnx");
  const std::string msg = error_of<ShapeError>([&] { model->forward({ones({2, 3}), ones({4})}); });
  CHECK_MESSAGE(contains(msg, "shapes.onnx: node 'bad_add' (Add): add: shapes [2, 3] and [4]"), msg);
  // The wrong number of inputs.
  CHECK(contains(error_of<ValueError>([&] {
                   model->forward(std::vector<Tensor>{ones({2, 3})});
                 }),
                 "forward got 1 inputs"));
}

TEST_CASE("onnx import errors: an attribute value Ember lacks is Unsupported naming the node") {
  ModelBuilder m;
  m.input("x", {2, 3}).output("y", TP::TensorProto::STRING);
  m.node("Cast", {"x"}, {"y"}, {onnx_test::attr_int("to", TP::TensorProto::STRING)}, "to_text");
  auto model = ember::onnx::load_from_bytes(m.bytes(), "string.onnx");
  const std::string msg = error_of<ember::onnx::Unsupported>([&] { model->forward({ones({2, 3})}); });
  CHECK_MESSAGE(contains(msg, "Cast (node 'to_text'): string tensors are not supported"), msg);
}
