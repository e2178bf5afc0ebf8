#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kvq/core/dtype.h"
#include "kvq/core/tensor.h"

namespace kvq {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType d :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kF8E4M3, DType::kF8E5M2,
        DType::kI8, DType::kU8, DType::kI16, DType::kI32, DType::kI64, DType::kBool}) {
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d) << dtype_name(d);
    EXPECT_EQ(dtype_from_torch_name(dtype_torch_name(d)), d) << dtype_torch_name(d);
  }
  EXPECT_FALSE(dtype_from_name("F12").has_value());
  EXPECT_EQ(dtype_from_torch_name("torch.bfloat16"), DType::kBF16);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.015625f);
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(round_to_bf16(21.4375f), 21.5f);  // spec §2.8 golden step
}

TEST(DType, Fp16AllCodesRoundTrip) {
  for (unsigned code = 0; code < 0x10000u; ++code) {
    const auto h = static_cast<std::uint16_t>(code);
    const float f = fp16_to_f32(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(f))));
    } else {
      ASSERT_EQ(f32_to_fp16(f), h) << "code " << code;
    }
  }
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);  // 65504
  EXPECT_EQ(fp16_to_f32(0x0001), std::ldexp(1.0f, -24));
}

TEST(Tensor, ShapeAndConversion) {
  Tensor t = Tensor::from_f32({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_EQ(t.dim(-1), 3);
  EXPECT_EQ(shape_str(t.shape()), "[2, 3]");
  Tensor r = t.reshape({3, 2});
  EXPECT_EQ(r.f32()[5], 6.0f);
  EXPECT_THROW(shape_numel({2, -1}), InvalidArgument);
}

}  // namespace
}  // namespace kvq
