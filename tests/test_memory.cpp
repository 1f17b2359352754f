// The CPU caching allocator: size classes, reuse of freed blocks, statistics.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include <ember/core/caching_allocator.h>
#include <ember/ember.h>

using namespace ember;

TEST_CASE("caching allocator: size classes waste at most 25% and are 64-byte multiples") {
  CHECK(CachingAllocator::size_class(1) == 256);
  CHECK(CachingAllocator::size_class(256) == 256);
  CHECK(CachingAllocator::size_class(257) == 320);
  CHECK(CachingAllocator::size_class(1024) == 1024);
  CHECK(CachingAllocator::size_class(1025) == 1280);
  CHECK(CachingAllocator::size_class(6400) == 7168);
  for (size_t n : {300u, 1000u, 4097u, 100000u, 12345678u}) {
    const size_t c = CachingAllocator::size_class(n);
    CHECK(c >= n);
    CHECK(c % 64 == 0);
    CHECK(static_cast<double>(c) <= 1.25 * static_cast<double>(n) + 64);
  }
}

TEST_CASE("caching allocator: EMBER_CACHING_ALLOCATOR=0 (the sanitizer runs) frees every block at once") {
  const char* env = std::getenv("EMBER_CACHING_ALLOCATOR");
  if (!env || std::string(env) != "0") return;  // covered by the next case
  const MemoryStats s0 = memory_stats();
  { Tensor a = empty({1000, 1000}); }
  const MemoryStats s1 = memory_stats();
  CHECK(s1.allocated == s0.allocated);
  CHECK(s1.reserved == s1.allocated);  // nothing held back
  CHECK(s1.cache_hits == s0.cache_hits);
}

TEST_CASE("caching allocator: a freed block is reused and counted") {
  const char* env = std::getenv("EMBER_CACHING_ALLOCATOR");
  if (env && std::string(env) == "0") return;  // reuse is off on purpose (previous case)
  empty_cache();
  const MemoryStats s0 = memory_stats();
  const void* first = nullptr;
  {
    Tensor a = empty({1000, 1000});  // 4 MB: class 4,000,000 rounds to 4,194,304
    first = a.data_ptr();
    const MemoryStats s1 = memory_stats();
    CHECK(s1.allocated - s0.allocated == 4194304);
    CHECK(s1.raw_allocs == s0.raw_allocs + 1);
    CHECK(s1.peak_allocated >= s1.allocated);
  }
  const MemoryStats s2 = memory_stats();
  CHECK(s2.allocated == s0.allocated);
  CHECK(s2.reserved - s0.reserved == 4194304);  // held in the cache
  {
    Tensor b = empty({999, 1001});  // same class: the cached block comes back
    CHECK(b.data_ptr() == first);
    CHECK(memory_stats().cache_hits == s2.cache_hits + 1);
    CHECK(memory_stats().raw_allocs == s2.raw_allocs);
  }
  empty_cache();
  CHECK(memory_stats().reserved == memory_stats().allocated);
}

TEST_CASE("caching allocator: peak tracks the high-water mark and resets") {
  reset_peak_memory_stats();
  const size_t base = memory_stats().allocated;
  {
    Tensor a = zeros({256, 1024}), b = zeros({256, 1024});
    CHECK(memory_stats().peak_allocated >= base + 2 * 1048576);
  }
  CHECK(memory_stats().peak_allocated >= base + 2 * 1048576);
  reset_peak_memory_stats();
  CHECK(memory_stats().peak_allocated == memory_stats().allocated);
}
