/* One instruction set's table of kernels (kernels.h), built with the set like every file here. */
#include "kernels.h"

void NBK_FN(nbt_kernels)(nbt_kernel_table *k) {
    *k = (nbt_kernel_table){
        .vexp_f32 = NBK_FN(nbt_vexp_f32),
        .vexp_f64 = NBK_FN(nbt_vexp_f64),
        .vlog_f32 = NBK_FN(nbt_vlog_f32),
        .vlog_f64 = NBK_FN(nbt_vlog_f64),
        .vtanh_f32 = NBK_FN(nbt_vtanh_f32),
        .vtanh_f64 = NBK_FN(nbt_vtanh_f64),
        .verf_f32 = NBK_FN(nbt_verf_f32),
        .verf_f64 = NBK_FN(nbt_verf_f64),
        .vexp_sum_f32 = NBK_FN(nbt_vexp_sum_f32),
        .vexp_sum_f64 = NBK_FN(nbt_vexp_sum_f64),
        .vexp_scale_f32 = NBK_FN(nbt_vexp_scale_f32),
        .vexp_scale_f64 = NBK_FN(nbt_vexp_scale_f64),
        .vgelu_f32 = NBK_FN(nbt_vgelu_f32),
        .vgelu_f64 = NBK_FN(nbt_vgelu_f64),
        .vgelu_tanh_f32 = NBK_FN(nbt_vgelu_tanh_f32),
        .vgelu_tanh_f64 = NBK_FN(nbt_vgelu_tanh_f64),
        .vsilu_f32 = NBK_FN(nbt_vsilu_f32),
        .vsilu_f64 = NBK_FN(nbt_vsilu_f64),
        .vsigmoid_f32 = NBK_FN(nbt_vsigmoid_f32),
        .vsigmoid_f64 = NBK_FN(nbt_vsigmoid_f64),
        .vgelu_tanh_grad_f32 = NBK_FN(nbt_vgelu_tanh_grad_f32),
        .vgelu_tanh_grad_f64 = NBK_FN(nbt_vgelu_tanh_grad_f64),
        .vsilu_grad_f32 = NBK_FN(nbt_vsilu_grad_f32),
        .vsilu_grad_f64 = NBK_FN(nbt_vsilu_grad_f64),
        .vgelu_derivative_f32 = NBK_FN(nbt_vgelu_derivative_f32),
        .vgelu_derivative_f64 = NBK_FN(nbt_vgelu_derivative_f64),
        .small_head_forward = NBK_FN(nba_small_head_forward),
        .small_head_backward = NBK_FN(nba_small_head_backward),
        .layer_norm_rows_f32 = NBK_FN(nbk_layer_norm_rows_f32),
        .layer_norm_backward_rows_f32 = NBK_FN(nbk_layer_norm_backward_rows_f32),
        .add_row_f32 = NBK_FN(nbk_add_row_f32),
        .add_rows_f32 = NBK_FN(nbk_add_rows_f32),
        .attend_row_f32 = NBK_FN(nbk_attend_row_f32),
        .adam_f32 = NBK_FN(nbk_adam_f32),
        .adam_f64 = NBK_FN(nbk_adam_f64),
    };
    NBK_FN(nbt_gemm_kernels)(&k->gemm_f32, &k->gemm_f64);
}
