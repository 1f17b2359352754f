/// \file
/// Autocast's cast cache, as PyTorch's: inside an autocast region, with
/// gradients off (generation, evaluation), a float32 parameter cast to the
/// region's 16-bit dtype is kept, so the second forward of the region (the
/// next token when decoding) reads the 16-bit copy instead of casting the
/// float32 weight again. The cache belongs to the thread and is emptied when
/// its outermost region ends, as torch.autocast's is on exit.
///
/// What is kept: float32 leaves that require grad (parameters), cast to
/// bfloat16 or float16, while grad mode is off: such a cast carries no graph,
/// so handing it out again is exactly a new cast. An entry is used only while
/// the parameter still has the storage, geometry and version it was cast
/// from: an in-place update (an optimizer step, a load into the parameter)
/// bumps the version and the next call casts again. With grad mode on every
/// op casts as it did without the cache (the casts join the graph).
#pragma once

#include <ember/core/dtype.h>

namespace ember {

class Tensor;

/// When t qualifies (above): t cast to dt, from this thread's cache (cast and kept on the first call).
/// Otherwise t itself, for the op to cast or take as it does without the cache.
Tensor autocast_param_cast(const Tensor& t, DType dt);

/// Casts in this thread's cache now (for tests).
size_t autocast_cache_size();

}  // namespace ember
