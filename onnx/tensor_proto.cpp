// TensorProto <-> Tensor: ONNX's tensors (initializers, Constant values,
// the test suite's .pb files) as Ember tensors and back.
//
// ONNX stores a tensor's values either packed little-endian in raw_data or
// in a typed repeated field (float_data, int32_data holding every type of
// 32 bits or fewer, int64_data, double_data, uint64_data). Every integer type
// becomes int64 here, float16 and bfloat16 stay 16-bit (their bits ride in
// int32_data when not raw).
#include <cstring>
#include <limits>

#include <ember/core/half.h>
#include <ember/onnx/import_ops.h>

namespace ember::onnx::detail {

namespace {
using TP = ::onnx::TensorProto;

const char* elem_name(int t) {
  switch (t) {
    case TP::FLOAT:
      return "float";
    case TP::UINT8:
      return "uint8";
    case TP::INT8:
      return "int8";
    case TP::UINT16:
      return "uint16";
    case TP::INT16:
      return "int16";
    case TP::INT32:
      return "int32";
    case TP::INT64:
      return "int64";
    case TP::STRING:
      return "string";
    case TP::BOOL:
      return "bool";
    case TP::FLOAT16:
      return "float16";
    case TP::DOUBLE:
      return "double";
    case TP::UINT32:
      return "uint32";
    case TP::UINT64:
      return "uint64";
    case TP::COMPLEX64:
      return "complex64";
    case TP::COMPLEX128:
      return "complex128";
    case TP::BFLOAT16:
      return "bfloat16";
    default:
      return "an unknown type";
  }
}

// Bytes per element of the packed (raw_data) form; 0 for types Ember does not hold.
size_t raw_size(int t) {
  switch (t) {
    case TP::BOOL:
    case TP::UINT8:
    case TP::INT8:
      return 1;
    case TP::UINT16:
    case TP::INT16:
    case TP::FLOAT16:
    case TP::BFLOAT16:
      return 2;
    case TP::FLOAT:
    case TP::INT32:
    case TP::UINT32:
      return 4;
    case TP::DOUBLE:
    case TP::INT64:
    case TP::UINT64:
      return 8;
    default:
      return 0;
  }
}

// Element i of raw little-endian data of type t, as int64 (integer types only).
int64_t raw_int(const char* p, int t) {
  switch (t) {
    case TP::UINT8:
      return static_cast<uint8_t>(*p);
    case TP::INT8:
      return static_cast<int8_t>(*p);
    case TP::UINT16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case TP::INT16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case TP::INT32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case TP::UINT32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }  // INT64, UINT64 (reinterpreted)
  }
}
}  // namespace

std::optional<DType> dtype_of_element(int64_t t) {
  switch (t) {
    case TP::FLOAT:
      return DType::Float32;
    case TP::DOUBLE:
      return DType::Float64;
    case TP::FLOAT16:
      return DType::Float16;
    case TP::BFLOAT16:
      return DType::BFloat16;
    case TP::BOOL:
      return DType::Bool;
    case TP::UINT8:
    case TP::INT8:
    case TP::UINT16:
    case TP::INT16:
    case TP::INT32:
    case TP::UINT32:
    case TP::INT64:
    case TP::UINT64:
      return DType::Int64;
    default:
      return std::nullopt;
  }
}

Tensor from_proto(const TP& t, const std::string& what) {
  const int type = t.data_type();
  if (t.data_location() == TP::EXTERNAL || t.external_data_size() > 0)
    throw Unsupported(what + ": tensor data in an external file is not supported");
  if (type == TP::STRING || type == TP::COMPLEX64 || type == TP::COMPLEX128)
    throw Unsupported(what + ": " + elem_name(type) + " tensors are not supported");
  const size_t esize = raw_size(type);
  if (esize == 0) throw IOError(what + ": unknown element type " + std::to_string(type));
  if (t.dims_size() > kMaxDims)
    throw Unsupported(what + ": " + std::to_string(t.dims_size()) + " dims (Ember holds at most " +
                      std::to_string(kMaxDims) + ")");
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) throw IOError(what + ": negative dim " + std::to_string(d));
    // Checked before multiplying, so a product can never overflow.
    if (d > 0 && n > (int64_t{1} << 40) / d) throw IOError(what + ": dims too large to hold");
    n *= d;
    dims.push_back(d);
  }
  const DType dt = *dtype_of_element(type);  // raw_size(type) > 0: a type Ember holds
  const bool raw = t.has_raw_data();
  // The data must hold exactly n elements, checked before anything is allocated: a claim of more than the
  // file carries is an error, not a read past the end (nor an allocation of what the dims claim).
  auto need = [&](int64_t have, const char* field) {
    if (have != n)
      throw IOError(what + ": " + field + " holds " + std::to_string(have) + " values but the dims say " +
                    std::to_string(n));
  };
  if (raw) {
    const std::string& r = t.raw_data();
    if (r.size() % esize != 0) throw IOError(what + ": raw_data is not a whole number of elements");
    need(static_cast<int64_t>(r.size() / esize), "raw_data");
  } else if (type == TP::FLOAT) {
    need(t.float_data_size(), "float_data");
  } else if (type == TP::DOUBLE) {
    need(t.double_data_size(), "double_data");
  } else if (type == TP::INT64) {
    need(t.int64_data_size(), "int64_data");
  } else if (type == TP::UINT64 || type == TP::UINT32) {
    need(t.uint64_data_size(), "uint64_data");
  } else {
    need(t.int32_data_size(), "int32_data");
  }
  Tensor out = empty(Shape(dims), TensorOptions(dt));
  if (n == 0) return out;  // (an empty tensor has no data pointer to copy into)
  switch (dt) {
    case DType::Float32: {
      float* o = out.data<float>();
      if (raw)
        std::memcpy(o, t.raw_data().data(), n * 4);
      else {
        std::copy(t.float_data().begin(), t.float_data().end(), o);
      }
      break;
    }
    case DType::Float64: {
      double* o = out.data<double>();
      if (raw)
        std::memcpy(o, t.raw_data().data(), n * 8);
      else {
        std::copy(t.double_data().begin(), t.double_data().end(), o);
      }
      break;
    }
    case DType::Float16:
    case DType::BFloat16: {
      uint16_t* o = static_cast<uint16_t*>(out.data_ptr());
      if (raw)
        std::memcpy(o, t.raw_data().data(), n * 2);
      else {
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
      }
      break;
    }
    case DType::Bool: {
      bool* o = out.data<bool>();
      if (raw)
        for (int64_t i = 0; i < n; ++i) o[i] = t.raw_data()[i] != 0;
      else {
        for (int64_t i = 0; i < n; ++i) o[i] = t.int32_data(static_cast<int>(i)) != 0;
      }
      break;
    }
    default: {  // every integer type
      int64_t* o = out.data<int64_t>();
      if (raw) {
        const char* p = t.raw_data().data();
        for (int64_t i = 0; i < n; ++i) o[i] = raw_int(p + i * esize, type);
      } else if (type == TP::INT64) {
        std::copy(t.int64_data().begin(), t.int64_data().end(), o);
      } else if (type == TP::UINT64 || type == TP::UINT32) {
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int64_t>(t.uint64_data(static_cast<int>(i)));
      } else {
        std::copy(t.int32_data().begin(), t.int32_data().end(), o);
      }
    }
  }
  return out;
}

void to_proto(const Tensor& t, TP& out, int elem_type) {
  const Tensor c = t.cpu().contiguous();
  if (elem_type == 0) {
    switch (c.dtype()) {
      case DType::Float32:
        elem_type = TP::FLOAT;
        break;
      case DType::Float64:
        elem_type = TP::DOUBLE;
        break;
      case DType::Float16:
        elem_type = TP::FLOAT16;
        break;
      case DType::BFloat16:
        elem_type = TP::BFLOAT16;
        break;
      case DType::Bool:
        elem_type = TP::BOOL;
        break;
      case DType::Int64:
        elem_type = TP::INT64;
        break;
    }
  }
  out.clear_dims();
  for (int64_t d : c.shape()) out.add_dims(d);
  out.set_data_type(elem_type);
  const int64_t n = c.numel();
  std::string raw(n * raw_size(elem_type), '\0');
  const bool same = (elem_type == TP::FLOAT && c.dtype() == DType::Float32) ||
                    (elem_type == TP::DOUBLE && c.dtype() == DType::Float64) ||
                    (elem_type == TP::FLOAT16 && c.dtype() == DType::Float16) ||
                    (elem_type == TP::BFLOAT16 && c.dtype() == DType::BFloat16) ||
                    (elem_type == TP::INT64 && c.dtype() == DType::Int64);
  if (same) {
    if (!raw.empty()) std::memcpy(raw.data(), c.data_ptr(), raw.size());
  } else if (elem_type == TP::BOOL && c.dtype() == DType::Bool) {
    for (int64_t i = 0; i < n; ++i) raw[i] = c.data<bool>()[i] ? 1 : 0;
  } else if (c.dtype() == DType::Int64 && raw_size(elem_type) > 0 && dtype_of_element(elem_type) == DType::Int64) {
    // Narrowing to the file's integer type, two's complement as ONNX stores it.
    const size_t es = raw_size(elem_type);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = c.data<int64_t>()[i];
      std::memcpy(raw.data() + i * es, &v, es);  // little-endian: the low bytes first
    }
  } else {
    throw Unsupported(
        ember::detail::cat_str("to_proto: a ", dtype_name(c.dtype()), " tensor as ONNX ", elem_name(elem_type)));
  }
  out.set_raw_data(std::move(raw));
}

}  // namespace ember::onnx::detail
