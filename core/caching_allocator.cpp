// The caching allocator's free lists and statistics.
#include <ember/core/caching_allocator.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>

namespace ember {

size_t CachingAllocator::size_class(size_t n) {
  if (n <= 256) return 256;
  // Top bit 2^k, then round up to a multiple of 2^(k-2).
  const int k = std::bit_width(n - 1) - 1;  // 2^k < n <= 2^(k+1)
  const size_t step = size_t{1} << (k - 2);
  return (n + step - 1) / step * step;
}

CachingAllocator::Pool& CachingAllocator::pool(int device_index) {
  if (!env_read_) {
    const char* e = std::getenv("EMBER_CACHING_ALLOCATOR");
    if (e && std::strcmp(e, "0") == 0) enabled_ = false;
    env_read_ = true;
  }
  const size_t i = static_cast<size_t>(device_index < 0 ? 0 : device_index);
  if (pools_.size() <= i) pools_.resize(i + 1);
  return pools_[i];
}

void* CachingAllocator::allocate(size_t nbytes, int device_index) {
  if (nbytes == 0) return nullptr;
  const size_t sz = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  Pool& p = pool(device_index);
  void* ptr = nullptr;
  auto it = p.free_blocks.find(sz);
  if (it != p.free_blocks.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    ++p.stats.cache_hits;
  } else {
    ptr = raw_allocate(sz, device_index);
    if (!ptr) {  // out of memory: give the cache back and try once more
      release_all(p, device_index);
      ptr = raw_allocate(sz, device_index);
      if (!ptr) throw std::bad_alloc();
    }
    ++p.stats.raw_allocs;
    p.stats.reserved += sz;
  }
  p.stats.allocated += sz;
  if (p.stats.allocated > p.stats.peak_allocated) p.stats.peak_allocated = p.stats.allocated;
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t nbytes, int device_index) {
  if (!ptr) return;
  const size_t sz = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  Pool& p = pool(device_index);
  p.stats.allocated -= sz;
  if (enabled_) {
    p.free_blocks[sz].push_back(ptr);
  } else {
    raw_free(ptr, sz, device_index);
    p.stats.reserved -= sz;
  }
}

void CachingAllocator::release_all(Pool& p, int device_index) {
  for (auto& [sz, blocks] : p.free_blocks) {
    for (void* b : blocks) raw_free(b, sz, device_index);
    p.stats.reserved -= sz * blocks.size();
    blocks.clear();
  }
}

MemoryStats CachingAllocator::stats(int device_index) {
  std::lock_guard<std::mutex> lock(mu_);
  return pool(device_index).stats;
}

void CachingAllocator::reset_peak(int device_index) {
  std::lock_guard<std::mutex> lock(mu_);
  Pool& p = pool(device_index);
  p.stats.peak_allocated = p.stats.allocated;
}

void CachingAllocator::empty_cache(int device_index) {
  std::lock_guard<std::mutex> lock(mu_);
  release_all(pool(device_index), device_index);
}

void CachingAllocator::set_enabled(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  pool(0);  // read the environment first, so this call has the last word
  enabled_ = on;
  if (!on)
    for (size_t i = 0; i < pools_.size(); ++i) release_all(pools_[i], static_cast<int>(i));
}

}  // namespace ember
