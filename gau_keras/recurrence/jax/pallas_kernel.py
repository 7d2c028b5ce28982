"""The recurrence as one fused Pallas kernel per pass (forward, backward), a ``custom_vjp`` pair.

On a GPU or TPU a ``lax.scan`` runs every time step as its own kernel launches;
here each program of the kernel owns a block of columns and runs the whole
time loop over them, as the official SRU++ CUDA kernel does.  The equations
are those of docs/srupp.md, computed in float32 whatever the input dtype.

Column layout.  A column is one (direction, batch row, hidden unit) chain:
N = dirs·B·d columns, each an independent recurrence.  Outside the kernel the
arguments are laid out time-major over columns ([rows, Lp, Np]: gates, time,
column), direction 1 reversed in time, so the kernel knows nothing of
directions or batch rows; XLA fuses these transposes with their neighbours.
Columns are padded to a multiple of the block, time to a multiple of the
kernel's time block; padded steps are marked as padding (state carried,
output 0), so they change nothing.

The per-column constants travel as one [7, Np] array (v_f, v_r, b_f, b_r, the
dropout mask, c0, scale_x) and the backward's per-column sums as one [6, Np]
array (dv_f, dv_r, db_f, db_r, dc0, dscale), reduced over batch rows outside.
The forward keeps c_{t−1} for every step ([Lp, Np], float32): the backward
recomputes f, r and c_t from it, so no step needs its neighbour's block.

Targets (``KernelPlan.target``):

* ``triton`` (CUDA GPUs, lowered through Triton): one time block holding all
  of Lp; the program's loop over time is a ``fori_loop`` that loads step t+1
  while it computes step t.
* ``mosaic`` (TPU): grid (column blocks, time blocks of 8 steps), the time
  axis sequential ("arbitrary"), the carried state and sums kept in the
  output block that stays resident across it; inputs and outputs in float32
  (Mosaic's (8, 128) tiles; 16-bit rows would be packed).
Either plan also runs in Pallas's interpreter (``interpret=True``) on any
backend: that is how the kernel runs on a CPU and how the tests check both
plans' semantics there.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from gau_keras.recurrence.common import TRACE_SCOPE, Layout

__all__ = ["KernelPlan", "plan", "recurrence", "TARGETS", "SUPPORTED_DTYPES"]

#: the kernel's lowerings: Pallas's Triton lowering (CUDA GPUs), Mosaic (TPUs)
TARGETS = ("triton", "mosaic")
#: dtypes of U the kernel takes (its state and arithmetic are float32)
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")

# rows of the per-column constants and of the backward's per-column sums
V_F, V_R, B_F, B_R, MASK, C0, SCALE = range(7)
N_CONSTANTS = 7
DV_F, DV_R, DB_F, DB_R, DC, DSCALE = range(6)
N_SUMS = 6

#: steps whose inputs the Triton loop loads before they are used
LOOKAHEAD = 2
#: Mosaic's time block: one (8, 128) float32 tile of rows
MOSAIC_ROWS = 8
MOSAIC_BLOCK = 128


class KernelPlan(NamedTuple):
    """The static shape of one kernel call.

    layout: dirs, d, k of the call; batch, length: B, L; x_width: x's last
    dimension; dtype: U's and x's dtype (and that of h, dU and dx); target: one
    of TARGETS; interpret: run in Pallas's interpreter instead; block: columns
    per program; rows: time steps per program (all of Lp, except on Mosaic);
    padded: whether the call carries a padding mask (always when time is
    padded); io_dtype: dtype of the column-layout U, x, h, dh and dU arrays the
    kernel reads and writes; num_warps: Triton warps per program; lookahead:
    steps whose inputs the Triton loop loads ahead."""

    layout: Layout
    batch: int
    length: int
    x_width: int
    dtype: str
    target: str
    interpret: bool
    block: int
    rows: int
    padded: bool
    io_dtype: str
    num_warps: int
    lookahead: int

    @property
    def columns(self):
        """N = dirs·B·d."""
        return self.layout.dirs * self.batch * self.layout.d

    @property
    def padded_columns(self):
        return _round_up(self.columns, self.block)

    @property
    def padded_length(self):
        return _round_up(self.length, self.rows)

    @property
    def grid(self):
        return self.padded_columns // self.block, self.padded_length // self.rows


def _round_up(n, multiple):
    return -(-n // multiple) * multiple


def _triton_block(columns):
    """Columns per Triton program: enough programs for every multiprocessor of a
    large GPU (the loop is latency-bound: all programs should run at once), at
    least one warp's worth, at most 256."""
    return max(32, min(256, pl.next_power_of_2(max(1, columns // 256))))


def plan(layout, batch, length, x_width, dtype, target, padded, block=None, interpret=False, lookahead=None):
    """The ``KernelPlan`` of a call with U [batch, length, dirs·d·k] and x
    [batch, length, x_width] of ``dtype``; ``block`` overrides the columns per
    program (a power of 2 on Triton, a multiple of 128 on Mosaic)."""
    dtype = jnp.dtype(dtype).name
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(
            f"sru_recurrence: the Pallas kernel takes {', '.join(SUPPORTED_DTYPES)} "
            f"(its state is float32), got {dtype}; use implementation='scan'"
        )
    if target not in TARGETS:
        raise ValueError(f"sru_recurrence: Pallas target {target!r}; expected one of {TARGETS}")
    for name, value in (("block", block), ("lookahead", lookahead)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"sru_recurrence: {name} must be a positive integer, got {value!r}")
    columns = layout.dirs * batch * layout.d
    if target == "mosaic":
        block = block or MOSAIC_BLOCK
        rows, io_dtype = MOSAIC_ROWS, "float32"
    else:
        block = block or _triton_block(columns)
        rows, io_dtype = length, dtype
    if target == "mosaic" and block % 128:
        raise ValueError(f"sru_recurrence: a Mosaic block must be a multiple of 128 columns, got {block}")
    if target != "mosaic" and block & (block - 1):
        raise ValueError(f"sru_recurrence: a Triton block must be a power of 2, got {block}")
    padded = padded or _round_up(length, rows) != length
    return KernelPlan(
        layout,
        batch,
        length,
        x_width,
        dtype,
        target,
        interpret,
        block,
        rows,
        padded,
        io_dtype,
        num_warps=max(1, min(8, block // 32)),
        lookahead=lookahead or LOOKAHEAD,
    )


# ---------------------------------------------------------------- column layout


def to_columns(t, p):
    """[B, L, dirs, d, *rest] → [*rest, Lp, Np] (direction 1 reversed in time, zero-padded)."""
    if p.layout.bidirectional:
        t = jnp.concatenate([t[:, :, :1], t[:, ::-1, 1:]], axis=2)
    rest = t.shape[4:]
    t = jnp.transpose(t, tuple(range(4, t.ndim)) + (1, 2, 0, 3)).reshape(*rest, p.length, p.columns)
    widths = [(0, 0)] * len(rest) + [(0, p.padded_length - p.length), (0, p.padded_columns - p.columns)]
    return jnp.pad(t, widths)


def from_columns(t, p):
    """[*rest, Lp, Np] → [B, L, dirs, d, *rest] (the inverse of ``to_columns``)."""
    dirs, d, _ = p.layout
    rest = t.shape[:-2]
    t = t[..., : p.length, : p.columns].reshape(*rest, p.length, dirs, p.batch, d)
    t = jnp.transpose(t, (len(rest) + 2, len(rest), len(rest) + 1, len(rest) + 3) + tuple(range(len(rest))))
    if p.layout.bidirectional:
        t = jnp.concatenate([t[:, :, :1], t[:, ::-1, 1:]], axis=2)
    return t


def _per_unit_row(w, p):
    """[dirs·d] (one value per hidden unit) → [N], the value of each column."""
    dirs, d, _ = p.layout
    return jnp.broadcast_to(w.reshape(dirs, 1, d), (dirs, p.batch, d)).reshape(-1)


def _per_chain_row(t, p):
    """[B, dirs·d] (one value per chain) → [N]."""
    dirs, d, _ = p.layout
    return jnp.transpose(t.reshape(p.batch, dirs, d), (1, 0, 2)).reshape(-1)


def _padded_rows(rows, p):
    """[n, N] → float32 [n, Np]."""
    return jnp.pad(jnp.stack(rows).astype(jnp.float32), ((0, 0), (0, p.padded_columns - p.columns)))


def _column_vectors(p, weight_c, bias, c0, mask_c, scale):
    """The [7, Np] per-column constants (rows V_F … SCALE)."""
    v, b = weight_c.reshape(2, -1), bias.reshape(2, -1)
    rows = [
        _per_unit_row(v[0], p),
        _per_unit_row(v[1], p),
        _per_unit_row(b[0], p),
        _per_unit_row(b[1], p),
        _per_chain_row(mask_c, p),
        _per_chain_row(c0, p),
        jnp.broadcast_to(scale, (p.columns,)),
    ]
    return _padded_rows(rows, p)


def _per_unit_sum(t, p):
    """[Np] per-column sums → [dirs·d], summed over batch rows."""
    dirs, d, _ = p.layout
    return t[: p.columns].reshape(dirs, p.batch, d).sum(axis=1).reshape(-1)


def _per_chain(t, p):
    """[Np] per-column values → [B, dirs·d]."""
    dirs, d, _ = p.layout
    return jnp.transpose(t[: p.columns].reshape(dirs, p.batch, d), (1, 0, 2)).reshape(p.batch, dirs * d)


# ---------------------------------------------------------------- kernels


def _sigmoid(z):
    return 1.0 / (1.0 + jnp.exp(-z))


class _Refs:
    """The kernel's refs by name, in pallas_call's order."""

    def __init__(self, names, refs):
        self.__dict__.update(zip(names, refs))


def _row(ref, t, gate=None):
    """Step t of a [rows, block] (or gate of a [gates, rows, block]) ref as a float32 [1, block] row."""
    index = (pl.ds(t, 1), slice(None)) if gate is None else (gate, pl.ds(t, 1), slice(None))
    return ref[index].astype(jnp.float32)


def _put(ref, t, value, gate=None):
    index = (pl.ds(t, 1), slice(None)) if gate is None else (gate, pl.ds(t, 1), slice(None))
    ref[index] = value.astype(ref.dtype)


def _time_loop(p, step, carry, reverse):
    """Runs ``step.compute(t, carry, step.load(t)) → carry`` over the block's rows.
    Mosaic: unrolled (static rows).  Triton / interpreter: a ``fori_loop`` whose
    carry also holds the inputs of the next ``p.lookahead`` steps, loaded that many
    steps before they are used (the loop is bound by memory latency, not work)."""
    order = (lambda i: p.rows - 1 - i) if reverse else (lambda i: i)
    if p.target == "mosaic":
        for i in range(p.rows):
            carry = step.compute(order(i), carry, step.load(order(i)))
        return carry
    ahead = p.lookahead

    def body(i, state):
        carry, ring = state  # ring[j]: the inputs of step i + j
        following = step.load(order(jnp.minimum(i + ahead, p.rows - 1)))
        return step.compute(order(i), carry, ring[0]), ring[1:] + (following,)

    ring = tuple(step.load(order(min(j, p.rows - 1))) for j in range(ahead))
    carry, _ = jax.lax.fori_loop(0, p.rows, body, (carry, ring))
    return carry


class _Step(NamedTuple):
    load: object
    compute: object


def _gate_inputs(p, refs, t):
    """u0, u1, u2, the skip term's source (U3, or x unscaled), and keep (1 = real step) at step t."""
    k = p.layout.k
    u = [_row(refs.u, t, i) for i in range(k)]
    source = u[3] if k == 4 else _row(refs.x, t)
    keep = _row(refs.keep, t) if p.padded else None
    return (u[0], u[1], u[2], source, keep)


def _forward_kernel(p, *refs):
    """One block: c_{t−1} → f, r, c_t, h_t for every step; h and c_{t−1} stored, c_last carried."""
    names = ["u"] + (["x"] if p.layout.k == 3 else []) + (["keep"] if p.padded else []) + ["const", "h", "cp", "c_last"]
    r = _Refs(names, refs)
    const = lambda i: r.const[pl.ds(i, 1), :]  # noqa: E731 - [1, block]
    v_f, v_r, b_f, b_r, m = const(V_F), const(V_R), const(B_F), const(B_R), const(MASK)
    scale = const(SCALE)

    @pl.when(pl.program_id(1) == 0)
    def _():
        r.c_last[...] = const(C0)

    def compute(t, c, inputs):
        u0, u1, u2, source, keep = inputs
        xp = source if p.layout.k == 4 else source * scale
        f = _sigmoid(u1 + b_f + v_f * c)
        rg = _sigmoid(u2 + b_r + v_r * c)
        c_new = u0 + (c - u0) * f
        h = xp + (c_new - xp) * (m * rg)
        if keep is not None:
            real = keep > 0.5
            c_new, h = jnp.where(real, c_new, c), jnp.where(real, h, 0.0)
        _put(r.h, t, h)
        _put(r.cp, t, c)
        return c_new

    step = _Step(functools.partial(_gate_inputs, p, r), compute)
    r.c_last[...] = _time_loop(p, step, r.c_last[...], reverse=False)


def _backward_kernel(p, *refs):
    """One block, back in time: dc carried, every per-step term in the loop; dU rows
    (and dx' in row 3) stored, the per-column sums accumulated."""
    names = (
        ["u"]
        + (["x"] if p.layout.k == 3 else [])
        + (["keep"] if p.padded else [])
        + ["const", "cp", "dh", "dc_last", "du", "sums"]
    )
    r = _Refs(names, refs)
    const = lambda i: r.const[pl.ds(i, 1), :]  # noqa: E731
    v_f, v_r, b_f, b_r, m = const(V_F), const(V_R), const(B_F), const(B_R), const(MASK)
    scale = const(SCALE)

    @pl.when(pl.program_id(1) == 0)
    def _():
        for i in range(N_SUMS):  # row by row: Triton takes power-of-2 shapes only
            r.sums[pl.ds(i, 1), :] = r.dc_last[...] if i == DC else jnp.zeros((1, p.block), jnp.float32)

    def load(t):
        return _gate_inputs(p, r, t) + (_row(r.cp, t), _row(r.dh, t))

    def compute(t, carry, inputs):
        dc, dvf, dvr, dbf, dbr, dscale = carry
        u0, u1, u2, source, keep, c_prev, dh = inputs
        if keep is not None:  # h = 0 on padding; a padded step's inputs reach no sum
            dh, source = jnp.where(keep > 0.5, dh, 0.0), jnp.where(keep > 0.5, source, 0.0)
        xp = source if p.layout.k == 4 else source * scale
        f = _sigmoid(u1 + b_f + v_f * c_prev)
        rg = _sigmoid(u2 + b_r + v_r * c_prev)
        c = u0 + (c_prev - u0) * f
        A = dh * m * rg
        dxp = dh - A
        dgr = A * (1.0 - rg) * (c - xp)
        s = dc + A
        dgf = s * (c_prev - u0) * f * (1.0 - f)
        du0 = s * (1.0 - f)
        dc_prev = s * f + dgf * v_f + dgr * v_r
        if keep is not None:  # a padded step passes dc through and contributes nothing
            real = keep > 0.5
            dgf, du0 = jnp.where(real, dgf, 0.0), jnp.where(real, du0, 0.0)
            dgr, dxp = jnp.where(real, dgr, 0.0), jnp.where(real, dxp, 0.0)
            dc_prev = jnp.where(real, dc_prev, dc)
        for gate, value in enumerate((du0, dgf, dgr, dxp)):
            _put(r.du, t, value, gate)
        return (
            dc_prev,
            dvf + dgf * c_prev,
            dvr + dgr * c_prev,
            dbf + dgf,
            dbr + dgr,
            dscale + (dxp * source if p.layout.k == 3 else 0.0),
        )

    step = _Step(load, compute)
    sums = [r.sums[pl.ds(i, 1), :] for i in (DC, DV_F, DV_R, DB_F, DB_R, DSCALE)]
    dc, dvf, dvr, dbf, dbr, dscale = _time_loop(p, step, tuple(sums), reverse=True)
    for i, value in zip((DC, DV_F, DV_R, DB_F, DB_R, DSCALE), (dc, dvf, dvr, dbf, dbr, dscale)):
        r.sums[pl.ds(i, 1), :] = value


# ---------------------------------------------------------------- pallas_call


def _compiler_options(p):
    """pallas_call's keyword arguments for the plan's target."""
    if p.interpret:
        return {"interpret": True}
    if p.target == "triton":
        from jax.experimental.pallas import triton as plgpu

        return {"compiler_params": plgpu.CompilerParams(num_warps=p.num_warps, num_stages=1)}
    from jax.experimental.pallas import tpu as pltpu

    return {"compiler_params": pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"))}


def _specs(p, reverse):
    """BlockSpecs of a [gates, Lp, Np] array, an [Lp, Np] array, an [n, Np] one (per column)."""
    n_time = p.grid[1]
    time = (lambda s: n_time - 1 - s) if reverse else (lambda s: s)
    gates = lambda n: pl.BlockSpec((n, p.rows, p.block), lambda j, s: (0, time(s), j))  # noqa: E731
    steps = pl.BlockSpec((p.rows, p.block), lambda j, s: (time(s), j))
    per_column = lambda n: pl.BlockSpec((n, p.block), lambda j, s: (0, j))  # noqa: E731
    return gates, steps, per_column


def _kernel_inputs(p, U, x, pad):
    """U [B, L, dirs·d·k] (and x, pad) → the kernel's column-layout arrays."""
    dirs, d, k = p.layout
    B, L = p.batch, p.length
    io = jnp.dtype(p.io_dtype)
    arrays = [to_columns(U.reshape(B, L, dirs, d, k).astype(io), p)]
    if k == 3:
        arrays.append(to_columns(x.reshape(B, L, dirs, d).astype(io), p))
    if p.padded:
        keep = jnp.broadcast_to(~pad[:, :, None, None], (B, L, dirs, d)).astype(jnp.float32)
        arrays.append(to_columns(keep, p))
    return arrays


def _forward_call(p, arrays, const):
    gates, steps, per_column = _specs(p, reverse=False)
    in_specs = [gates(p.layout.k)] + [steps] * (len(arrays) - 1) + [per_column(N_CONSTANTS)]
    Lp, Np = p.padded_length, p.padded_columns
    out_shape = (
        jax.ShapeDtypeStruct((Lp, Np), p.io_dtype),
        jax.ShapeDtypeStruct((Lp, Np), jnp.float32),
        jax.ShapeDtypeStruct((1, Np), jnp.float32),
    )
    return pl.pallas_call(
        functools.partial(_forward_kernel, p),
        grid=p.grid,
        in_specs=in_specs,
        out_specs=(steps, steps, per_column(1)),
        out_shape=out_shape,
        name="sru_forward",
        **_compiler_options(p),
    )(*arrays, const)


def _backward_call(p, arrays, const, cp, dh, dc_last):
    gates, steps, per_column = _specs(p, reverse=True)
    in_specs = (
        [gates(p.layout.k)] + [steps] * (len(arrays) - 1) + [per_column(N_CONSTANTS), steps, steps, per_column(1)]
    )
    Lp, Np = p.padded_length, p.padded_columns
    out_shape = (jax.ShapeDtypeStruct((4, Lp, Np), p.io_dtype), jax.ShapeDtypeStruct((N_SUMS, Np), jnp.float32))
    return pl.pallas_call(
        functools.partial(_backward_kernel, p),
        grid=p.grid,
        in_specs=in_specs,
        out_specs=(gates(4), per_column(N_SUMS)),
        out_shape=out_shape,
        name="sru_backward",
        **_compiler_options(p),
    )(*arrays, const, cp, dh, dc_last)


# ---------------------------------------------------------------- the custom_vjp pair


def _forward(p, U, x, weight_c, bias, c0, pad, scale, mask_c):
    """→ (h [B, L, dirs·d] in U's dtype, c_last [B, dirs·d]), residuals."""
    dirs, d, _ = p.layout
    arrays = _kernel_inputs(p, U, x, pad)
    const = _column_vectors(p, weight_c, bias, c0, mask_c, scale)
    h, cp, c_last = _forward_call(p, arrays, const)
    h = from_columns(h, p).reshape(p.batch, p.length, dirs * d).astype(p.dtype)
    c_last = _per_chain(c_last[0], p)
    return (h, c_last), (arrays, const, cp)


def _backward(p, residuals, dh, dc_last):
    """→ (dU, dx, dweight_c, dbias, dc0, dscale) from the forward's residuals."""
    arrays, const, cp = residuals
    dirs, d, k = p.layout
    B, L = p.batch, p.length
    dh_cols = to_columns(dh.reshape(B, L, dirs, d).astype(p.io_dtype), p)
    dc_cols = _padded_rows([_per_chain_row(dc_last, p)], p)
    du, sums = _backward_call(p, arrays, const, cp, dh_cols, dc_cols)
    du = from_columns(du, p)  # [B, L, dirs, d, 4]: du0, du1, du2, dx'
    dU = du[..., :k].reshape(B, L, dirs * d * k).astype(p.dtype)
    if k == 3:
        dx = (du[..., 3].astype(jnp.float32) * const[SCALE, 0]).reshape(B, L, dirs * d).astype(p.dtype)
        dscale = jnp.sum(sums[DSCALE])
    else:
        dx, dscale = jnp.zeros((B, L, p.x_width), p.dtype), jnp.zeros((), jnp.float32)
    dweight_c = jnp.concatenate([_per_unit_sum(sums[DV_F], p), _per_unit_sum(sums[DV_R], p)])
    dbias = jnp.concatenate([_per_unit_sum(sums[DB_F], p), _per_unit_sum(sums[DB_R], p)])
    dc0 = _per_chain(sums[DC], p)
    return dU, dx, dweight_c, dbias, dc0, dscale


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _recurrence(p, U, x, weight_c, bias, c0, pad, scale, mask_c):
    with jax.named_scope(TRACE_SCOPE):
        outputs, _ = _forward(p, U, x, weight_c, bias, c0, pad, scale, mask_c)
    return outputs


def _recurrence_fwd(p, U, x, weight_c, bias, c0, pad, scale, mask_c):
    with jax.named_scope(TRACE_SCOPE):
        outputs, residuals = _forward(p, U, x, weight_c, bias, c0, pad, scale, mask_c)
    return outputs, residuals


def _recurrence_bwd(p, residuals, cotangents):
    dh, dc_last = cotangents
    with jax.named_scope(TRACE_SCOPE):
        dU, dx, dweight_c, dbias, dc0, dscale = _backward(p, residuals, dh, dc_last)
    return dU, dx, dweight_c, dbias, dc0, None, dscale, None


_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


def recurrence(p, U, x, weight_c, bias, c0, pad, scale, mask_c):
    """(h [B, L, dirs·d] in U's dtype, c_last [B, dirs·d]) by the kernel of plan ``p``;
    differentiable in U, x, weight_c, bias, c0 and scale (pad and mask_c get none)."""
    return _recurrence(p, U, x, weight_c, bias, c0, pad, scale, mask_c)
