"""benchmarks/xla_profile.py: attributing profiled XLA instructions, on a GPU-shaped compiled program."""

import sys

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import xla_profile  # noqa: E402

GPU_HLO = """HloModule jit_step, entry_computation_layout={()->()}

%fused_dot (p0: bf16[8,512,768], p1: bf16[768,3200]) -> bf16[8,512,3200] {
  %p0 = bf16[8,512,768]{2,1,0} parameter(0)
  %p1 = bf16[768,3200]{1,0} parameter(1)
  ROOT %dot.1 = bf16[8,512,3200]{2,1,0} dot(%p0, %p1), lhs_contracting_dims={2}, rhs_contracting_dims={0}
}

%fused_silu (p0: bf16[8,512,3200]) -> bf16[8,512,3200] {
  %p0 = bf16[8,512,3200]{2,1,0} parameter(0)
  ROOT %logistic.2 = bf16[8,512,3200]{2,1,0} logistic(%p0)
}

%fused_adam (p0: f32[768], p1: f32[768]) -> (f32[768], f32[768], f32[768], f32[768], f32[768], /*index=5*/f32[768]) {
  %p0 = f32[768]{0} parameter(0)
  %p1 = f32[768]{0} parameter(1)
  ROOT %tuple.1 = (f32[768]{0}, f32[768]{0}, f32[768]{0}, f32[768]{0}, f32[768]{0}, /*index=5*/f32[768]{0}) tuple(%p0, %p1, %p0, %p1, %p0, /*index=5*/%p1)
}

ENTRY %main.9 (Arg_0.1: bf16[8,512,768]) -> (bf16[8,512,3200], f32[768], f32[768], f32[768], f32[768], /*index=5*/f32[768]) {
  %loop_add_fusion.2 = (f32[768]{0}, f32[768]{0}, f32[768]{0}, f32[768]{0}, f32[768]{0}, /*index=5*/f32[768]{0}) fusion(%m, %v), kind=kLoop, calls=%fused_adam, metadata={op_name="jit(step)/adam/add"}
  %dot.8 = f32[768,768]{1,0} dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/transpose(jvp(m))/Transformer-2-FeedForward/o_dense/dot_general"}
  %gemm_fusion.3 = bf16[8,512,3200]{2,1,0} fusion(%a, %b), kind=kCustom, calls=%fused_dot, metadata={op_name="jit(step)/jvp(gau_alpha_backbone_2)/Transformer-11-GatedAttentionUnit/i_dense/dot_general" source_file="x.py"}
  %loop_fusion.7 = bf16[8,512,3200]{2,1,0} fusion(%gemm_fusion.3), kind=kLoop, calls=%fused_silu, metadata={op_name="jit(step)/transpose(jvp(gau_alpha_backbone_2))/Transformer-3-GatedAttentionUnit/i_dense/silu"}
  %custom-call.4 = (bf16[4,4096,12,64]{3,2,1,0}, u8[0]{0}) custom-call(%q, %k, %v), custom_call_target="__cudnn$fmhaSoftmax", metadata={op_name="jit(step)/jvp(roformer_v2_backbone)/Transformer-0-MultiHeadSelfAttention/dot_product_attention"}
  %cublas-gemm.5 = (f32[768,768]{1,0}, s8[4194304]{0}) custom-call(%x, %y), custom_call_target="__cublas$gemm"
  ROOT %copy.6 = f32[768]{0} copy(%z), metadata={op_name="jit(step)/adam/mul"}
}
"""  # noqa: E501  (XLA's own long lines)


def test_instructions_are_attributed_to_category_pass_and_model_code():
    known = xla_profile.instructions(GPU_HLO)
    products = xla_profile.fusions_with_products(GPU_HLO)
    assert products == {"gemm_fusion.3"}  # not fused_adam, whose header ends in a long tuple

    def attribute(op):
        opcode, detail, op_name = known[op]
        return (xla_profile.category(opcode, detail, op in products), *xla_profile.source(op_name))

    assert attribute("gemm_fusion.3") == (
        "matrix product",
        "forward",
        "Transformer-*-GatedAttentionUnit/i_dense/dot_general",
    )
    assert attribute("loop_fusion.7") == (
        "element-wise / reduction fusion",
        "backward",
        "Transformer-*-GatedAttentionUnit/i_dense/silu",
    )
    assert attribute("custom-call.4")[:2] == ("fused attention", "forward")
    assert attribute("cublas-gemm.5") == ("matrix product", "?", "(no op_name)")
    assert attribute("copy.6") == ("layout and dtype", "update", "adam/mul")
    assert attribute("loop_add_fusion.2") == ("element-wise / reduction fusion", "update", "adam/add")
    assert attribute("dot.8") == ("matrix product", "backward", "Transformer-*-FeedForward/o_dense/dot_general")
    assert xla_profile.module_name(GPU_HLO) == "jit_step"


def test_table_shares_add_up_by_category():
    rows = [
        {"op": "a", "category": "matrix product", "pass": "forward", "source": "x", "ms": 3.0},
        {"op": "b", "category": "matrix product", "pass": "backward", "source": "x", "ms": 1.0},
        {"op": "c", "category": "layout and dtype", "pass": "update", "source": "y", "ms": 4.0},
    ]
    text = xla_profile.table(rows, "t")
    assert text.startswith("### t: 8 ms a step summed over 3 instructions")
    assert "| matrix product | 4 | 50% |" in text and "| layout and dtype | 4 | 50% |" in text
    assert "| x (forward) | 3 | 38% |" in text
