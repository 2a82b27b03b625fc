// f16-matmul: whether Debian 12's oneDNN 2.6.3 creates an f16 matmul on this processor (f16 weights,
// f16 or f32 activations, f32 or f16 output), and its effective ISA (dnnl_cpu_isa_t).
// build: g++ -O1 -o /tmp/f16 f16-matmul.cc -ldnnl
#include <cstdio>
#include "oneapi/dnnl/dnnl.hpp"
const char* Name(dnnl::memory::data_type t) { return t == dnnl::memory::data_type::f16 ? "f16" : "f32"; }
int main() {
  using dt = dnnl::memory::data_type; using tag = dnnl::memory::format_tag;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  for (auto wt : {dt::f16}) for (auto st : {dt::f16, dt::f32}) for (auto dst : {dt::f32, dt::f16}) {
    try {
      dnnl::memory::desc src({512, 2048}, st, tag::ab), w({2048, 2048}, wt, tag::ba), d({512, 2048}, dst, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, w, d), eng);
      std::printf("src %s wei f16 dst %s: %s\n", Name(st), Name(dst), pd.impl_info_str());
    } catch (const dnnl::error& e) { std::printf("src %s wei f16 dst %s: %s\n", Name(st), Name(dst), e.what()); }
  }
  std::printf("effective isa: 0x%x (0xe7: avx512_core_bf16)\n", (unsigned)dnnl::get_effective_cpu_isa());
}
