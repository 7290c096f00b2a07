# Sources of mixprec::autodiff. Conversion kernels for each x86 instruction set are compiled in their
# own translation unit with that set's flags and picked at run time (convert.cpp).
target_sources(mixprec PRIVATE
  autodiff/tensor/isa.cpp
  autodiff/tensor/dtype.cpp
  autodiff/tensor/convert.cpp
  autodiff/tensor/rounding.cpp
  autodiff/tensor/stochastic_rounding.cpp
  autodiff/tensor/mx.cpp
  autodiff/tensor/shape.cpp
  autodiff/tensor/tensor.cpp
  autodiff/tensor/print.cpp
  autodiff/tensor/tensor_xt.cpp
  autodiff/tensor/kernels_elementwise.cpp
  autodiff/tensor/kernels_matmul.cpp
  autodiff/tensor/kernels_attention.cpp
  autodiff/tensor/kernels_quantize.cpp
  autodiff/tensor/kernels_mx.cpp
  autodiff/tensor/matmul_onednn.cpp
  autodiff/tensor/core_share.cpp
  autodiff/tensor/measured.cpp
  autodiff/tape.cpp
  autodiff/variable.cpp
  autodiff/ops_elementwise.cpp
  autodiff/ops_matmul.cpp
  autodiff/ops_fp8.cpp
  autodiff/ops_mx.cpp
  autodiff/ops_shape.cpp
  autodiff/ops_reduce.cpp
  autodiff/ops_softmax.cpp
  autodiff/ops_attention.cpp
  autodiff/ops_conv.cpp
  autodiff/ops_conv_pool.cpp
  autodiff/conv_backend.cpp
  autodiff/tensor/conv_onednn.cpp
  autodiff/tensor/conv_onednn_chunks.cpp
  autodiff/tensor/conv_onednn_plan.cpp
  autodiff/ops_pool.cpp
  autodiff/ops_nn.cpp
  autodiff/ops_loss.cpp
  autodiff/gradcheck.cpp)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_sources(mixprec PRIVATE autodiff/tensor/arch/convert_avx2.cpp autodiff/tensor/arch/convert_avx512.cpp
                                 autodiff/tensor/arch/conv_weights_avx512_bf16.cpp
                                 autodiff/tensor/arch/conv_first_layer_avx512.cpp autodiff/tensor/arch/conv_first_layer_avx2.cpp)
  set_source_files_properties(autodiff/tensor/arch/convert_avx2.cpp autodiff/tensor/arch/conv_first_layer_avx2.cpp
                              PROPERTIES COMPILE_OPTIONS "-mavx2;-mf16c;-mfma")
  set_source_files_properties(autodiff/tensor/arch/convert_avx512.cpp autodiff/tensor/arch/conv_weights_avx512_bf16.cpp
                              autodiff/tensor/arch/conv_first_layer_avx512.cpp
                              PROPERTIES COMPILE_OPTIONS
    "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx2;-mf16c;-mfma;-mprefer-vector-width=512;-Wno-maybe-uninitialized")
# (GCC 12 warns about the deliberately undefined upper lanes inside its own AVX-512 intrinsic headers.)
  target_compile_definitions(mixprec PRIVATE MIXPREC_X86_KERNELS)
endif()
