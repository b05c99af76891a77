"""The C++ every generated CUDA source starts with: fixed-width integer types, NumPy's
semantics where C's differ (floor division and modulo, NaN-propagating max/min, saturating
float-to-int conversion, shifts past the bit width, wrapping signed arithmetic), and the
block-wide reduction used by row-wise kernels.

The same text compiles as CUDA (NVRTC or nvcc) and, with ``RJ_EMULATE`` defined, as plain
C++ for the CPU emulator (``EMULATOR_HEADER``), which runs one OpenMP thread per CUDA thread
so that tests without a GPU execute the generated kernels themselves.
"""

PRELUDE = r"""
#ifdef RJ_EMULATE
#include "rj_emulate.h"
#else
#ifdef __CUDACC_RTC__
typedef signed char int8_t;  typedef short int16_t;  typedef int int32_t;  typedef long long int64_t;
typedef unsigned char uint8_t;  typedef unsigned short uint16_t;  typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <cstdint>
#endif
#define RJ_DEV __device__ __forceinline__
#define RJ_MEMBER __device__ __forceinline__
#define RJ_INF_F __int_as_float(0x7f800000)
#define RJ_NAN_F __int_as_float(0x7fc00000)
#define RJ_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define RJ_NAN_D __longlong_as_double(0x7ff8000000000000LL)
// float16 in memory is its bits; conversions by PTX (no cuda_fp16.h: NVRTC has no include path)
RJ_DEV float rj_h2f(uint16_t h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
RJ_DEV uint16_t rj_f2h(float f) { uint16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
RJ_DEV bool rj_isnan(float x) { return isnan(x); }
RJ_DEV bool rj_isnan(double x) { return isnan(x); }
RJ_DEV bool rj_isinf(float x) { return isinf(x); }
RJ_DEV bool rj_isinf(double x) { return isinf(x); }
#endif

// float16 values live in float registers; each operation rounds like NumPy's float16 ops
RJ_DEV float rj_h(float x) { return rj_h2f(rj_f2h(x)); }

// an index read from data (tir.index_checks): outside [0, n) the first failing access fills
// the error record {check number + 1, index, size}, the access goes to element 0, and the
// caller raises IndexError after the launch
RJ_DEV int64_t rj_chk(int64_t i, int64_t n, unsigned long long *err, unsigned long long code) {
  if ((uint64_t)i < (uint64_t)n) return i;
  if (atomicCAS(err, 0ULL, code) == 0ULL) { err[1] = (unsigned long long)i; err[2] = (unsigned long long)n; }
  return 0;
}

template <class T> struct rj_unsigned;
template <> struct rj_unsigned<int8_t> { typedef uint8_t t; };
template <> struct rj_unsigned<int16_t> { typedef uint16_t t; };
template <> struct rj_unsigned<int32_t> { typedef uint32_t t; };
template <> struct rj_unsigned<int64_t> { typedef uint64_t t; };
template <> struct rj_unsigned<uint8_t> { typedef uint8_t t; };
template <> struct rj_unsigned<uint16_t> { typedef uint16_t t; };
template <> struct rj_unsigned<uint32_t> { typedef uint32_t t; };
template <> struct rj_unsigned<uint64_t> { typedef uint64_t t; };

// wrapping integer arithmetic (signed overflow is undefined in C++, NumPy wraps)
template <class T> RJ_DEV T rj_add(T a, T b) { typedef typename rj_unsigned<T>::t U; return (T)(U)((U)a + (U)b); }
template <class T> RJ_DEV T rj_sub(T a, T b) { typedef typename rj_unsigned<T>::t U; return (T)(U)((U)a - (U)b); }
template <class T> RJ_DEV T rj_mul(T a, T b) { typedef typename rj_unsigned<T>::t U; return (T)(U)((U)a * (U)b); }
template <class T> RJ_DEV T rj_neg(T a) { typedef typename rj_unsigned<T>::t U; return (T)(U)((U)0 - (U)a); }

// NumPy's floor division and modulo; a zero divisor gives 0
template <class T> RJ_DEV T rj_floordiv(T a, T b) {
  if (b == 0) return 0;
  if ((T)-1 > 0) return a / b;                          // unsigned
  if (b == (T)-1) return rj_neg(a);
  T q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
template <class T> RJ_DEV T rj_mod(T a, T b) {
  if (b == 0 || ((T)-1 < 0 && b == (T)-1)) return 0;
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <class T> RJ_DEV T rj_truncdiv(T a, T b) {
  if (b == 0) return 0;
  if ((T)-1 < 0 && b == (T)-1) return rj_neg(a);
  return a / b;
}
RJ_DEV double rj_floordiv(double a, double b) {
  if (b == 0.0) return a / b;
  double mod = fmod(a, b), div = (a - mod) / b;
  if (mod != 0.0 && ((b < 0.0) != (mod < 0.0))) div -= 1.0;
  if (div == 0.0) return copysign(0.0, a / b);
  double fl = floor(div);
  return (div - fl > 0.5) ? fl + 1.0 : fl;
}
RJ_DEV double rj_mod(double a, double b) {
  double mod = fmod(a, b);
  if (b == 0.0) return mod;
  if (mod == 0.0) return copysign(0.0, b);
  return ((b < 0.0) != (mod < 0.0)) ? mod + b : mod;
}
RJ_DEV float rj_floordiv(float a, float b) {
  if (b == 0.0f) return a / b;
  float mod = fmodf(a, b), div = (a - mod) / b;
  if (mod != 0.0f && ((b < 0.0f) != (mod < 0.0f))) div -= 1.0f;
  if (div == 0.0f) return copysignf(0.0f, a / b);
  float fl = floorf(div);
  return (div - fl > 0.5f) ? fl + 1.0f : fl;
}
RJ_DEV float rj_mod(float a, float b) {
  float mod = fmodf(a, b);
  if (b == 0.0f) return mod;
  if (mod == 0.0f) return copysignf(0.0f, b);
  return ((b < 0.0f) != (mod < 0.0f)) ? mod + b : mod;
}

// max/min: NumPy's propagate NaN (fmaxf does not)
template <class T> RJ_DEV T rj_max(T a, T b) { return a > b ? a : b; }
template <class T> RJ_DEV T rj_min(T a, T b) { return a < b ? a : b; }
RJ_DEV float rj_max(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
RJ_DEV float rj_min(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
RJ_DEV double rj_max(double a, double b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
RJ_DEV double rj_min(double a, double b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
RJ_DEV bool rj_max(bool a, bool b) { return a || b; }
RJ_DEV bool rj_min(bool a, bool b) { return a && b; }

// shifts: past the bit width NumPy gives 0 (or -1 for a negative signed value)
template <class T> RJ_DEV T rj_shl(T a, T b) {
  typedef typename rj_unsigned<T>::t U;
  return ((U)b < (U)(8 * sizeof(T))) ? (T)(U)((U)a << (U)b) : (T)0;
}
template <class T> RJ_DEV T rj_shr(T a, T b) {
  typedef typename rj_unsigned<T>::t U;
  if ((U)b < (U)(8 * sizeof(T))) return (T)(a >> (U)b);
  return ((T)-1 < 0 && a < 0) ? (T)-1 : (T)0;
}
template <class T> RJ_DEV T rj_ipow(T a, T b) {
  T r = 1;
  while (b > 0) { if (b & 1) r = rj_mul(r, a); a = rj_mul(a, a); b = (T)(b >> 1); }
  return r;
}

// float -> integer as NumPy on x86-64 and the LLVM backend: out of range or NaN gives the
// cvtt instruction's INT_MIN of its width; narrow types convert through int32 and wrap;
// unsigned 32/64 bits shift values at or above 2**31 / 2**63 down and flip the top bit back
template <class F> RJ_DEV int32_t rj_f2i32(F x) {
  return (x >= (F)-2147483648.0 && x < (F)2147483648.0) ? (int32_t)x : (int32_t)(-2147483647 - 1);
}
template <class F> RJ_DEV int64_t rj_f2i64(F x) {
  return (x >= (F)-9.2233720368547758e18 && x < (F)9.2233720368547758e18) ? (int64_t)x : (int64_t)(-0x7fffffffffffffffLL - 1);
}
template <class F> RJ_DEV uint32_t rj_f2u32(F x) {
  if (x >= (F)2147483648.0) return (uint32_t)rj_f2i32(x - (F)2147483648.0) ^ 0x80000000u;
  return (uint32_t)rj_f2i32(x);
}
template <class F> RJ_DEV uint64_t rj_f2u64(F x) {
  if (x >= (F)9.2233720368547758e18)
    return (uint64_t)rj_f2i64(x - (F)9.2233720368547758e18) ^ 0x8000000000000000ULL;
  return (uint64_t)rj_f2i64(x);
}

// combining functions of reductions, with their identities
struct rj_add_op { template <class T> RJ_MEMBER T operator()(T a, T b) const { return a + b; } };
struct rj_iadd_op { template <class T> RJ_MEMBER T operator()(T a, T b) const { return rj_add(a, b); } };
struct rj_mul_op { template <class T> RJ_MEMBER T operator()(T a, T b) const { return a * b; } };
struct rj_imul_op { template <class T> RJ_MEMBER T operator()(T a, T b) const { return rj_mul(a, b); } };
struct rj_max_op { template <class T> RJ_MEMBER T operator()(T a, T b) const { return rj_max(a, b); } };
struct rj_min_op { template <class T> RJ_MEMBER T operator()(T a, T b) const { return rj_min(a, b); } };
struct rj_and_op { template <class T> RJ_MEMBER T operator()(T a, T b) const { return a & b; } };
struct rj_or_op { template <class T> RJ_MEMBER T operator()(T a, T b) const { return a | b; } };
struct rj_xor_op { template <class T> RJ_MEMBER T operator()(T a, T b) const { return a ^ b; } };

// A block-wide reduction (blockDim.x a multiple of 32): warp shuffles, then one value per
// warp through shared memory; every thread returns the result.  Called by all threads.
template <class T, class F> RJ_DEV T rj_block_reduce(T v, T identity, F f) {
  __shared__ double rj_red_smem[32];
  T *sm = (T *)rj_red_smem;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) sm[warp] = v;
  __syncthreads();
  // every warp takes part (the emulator's shuffles are team-wide); warp 0's result counts
  v = (int)threadIdx.x < nwarps ? sm[threadIdx.x] : identity;
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x == 0) sm[0] = v;
  __syncthreads();
  v = sm[0];
  __syncthreads();
  return v;
}
"""

# C++ for the CPU emulator: CUDA's built-in variables and intrinsics the generated code uses.
# A launch runs the blocks one after another; the threads of a block are an OpenMP team of
# blockDim.x threads, so __syncthreads is a barrier and __shared__ variables (static) are
# shared by the team.
EMULATOR_HEADER = r"""
#include <cstdint>
#include <cmath>
#include <cstring>
#include <omp.h>
using std::isnan; using std::isinf; using std::isfinite; using std::signbit;
#define RJ_DEV static inline
#define RJ_MEMBER inline
#define __global__
#define __device__
#define __forceinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
struct rj_dim3 { unsigned x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) double2 { double x, y; };
struct alignas(16) longlong2 { long long x, y; };
struct alignas(16) ulonglong2 { unsigned long long x, y; };
static thread_local rj_dim3 threadIdx, blockIdx;
static rj_dim3 blockDim, gridDim;
#define __syncthreads() _Pragma("omp barrier")
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double f; std::memcpy(&f, &i, 8); return f; }
#define RJ_INF_F __int_as_float(0x7f800000)
#define RJ_NAN_F __int_as_float(0x7fc00000)
#define RJ_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define RJ_NAN_D __longlong_as_double(0x7ff8000000000000LL)
static inline float rj_h2f(uint16_t h) { _Float16 x; std::memcpy(&x, &h, 2); return (float)x; }
static inline uint16_t rj_f2h(float f) { _Float16 x = (_Float16)f; uint16_t h; std::memcpy(&h, &x, 2); return h; }
template <class T> static inline bool rj_isnan(T x) { return std::isnan(x); }
template <class T> static inline bool rj_isinf(T x) { return std::isinf(x); }
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp, unsigned long long v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return cmp;
}
// shuffles: every thread of the team calls them together (as the generated code does);
// thread t gets thread src's v, or its own where src is outside its warp or the block
static double rj_shfl_slots[1024];
template <class T> static inline T rj_shfl_from(T v, unsigned src, bool ok) {
  T *slots = (T *)rj_shfl_slots;
  _Pragma("omp barrier")
  slots[threadIdx.x] = v;
  _Pragma("omp barrier")
  T r = (ok && src < blockDim.x) ? slots[src] : v;
  _Pragma("omp barrier")
  return r;
}
template <class T> static inline T __shfl_down_sync(unsigned, T v, int o) {
  return rj_shfl_from(v, threadIdx.x + o, (threadIdx.x & 31) + o < 32);
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o) {
  return rj_shfl_from(v, threadIdx.x ^ (unsigned)o, true);
}
// a warp's memory fence: the whole team's barrier (every thread reaches it, as in the kernels)
#define __syncwarp() _Pragma("omp barrier")
"""
