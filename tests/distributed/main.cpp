// The multi-process suite's runner. CTest starts it as
// `mpiexec -n 2 ember_distributed_tests` (tests/CMakeLists.txt): every rank
// runs every test case in the same order, so the collectives inside them
// match. Test cases use CHECK, never REQUIRE: a REQUIRE failing on one rank
// would skip that rank's remaining collectives and leave its peer waiting.
// The job fails when any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <ember/ember.h>

int main(int argc, char** argv) {
  using namespace ember;
  try {
    distributed::init();
  } catch (const Error& e) {
    std::fprintf(stderr, "ember_distributed_tests: %s\n", e.what());
    return 1;
  }
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit()) return rc;  // --help, --list-test-cases
  Tensor failed = scalar_tensor(rc != 0 ? 1.0 : 0.0, kInt64);
  distributed::all_reduce(failed, distributed::ReduceOp::Max);
  const bool any_failed = failed.item() != 0;
  if (distributed::rank() == 0)
    std::printf("ember_distributed_tests: %d processes, %s\n", distributed::world_size(),
                any_failed ? "a rank failed" : "every rank passed");
  distributed::finalize();
  return any_failed ? 1 : 0;
}
