"""Fits the polynomials of mixedcore/_core/src/act/mc_act_scalar.h and prints them as C: the
float64 ones, then the float32 ones of gelu for 16-bit outputs (design f there).

Each function is interpolated at 64 Chebyshev nodes in 50-digit arithmetic (mpmath), the
Chebyshev series is cut at the chosen degree, converted to monomials of the evaluation variable
(Horner in C) and the coefficients rounded to float64.  The report gives, per polynomial, the
largest relative error of the rounded coefficients evaluated exactly (the fit error, on 4001
points of the interval) and the condition of the monomial evaluation, max sum|a_j t^j| / |p(t)|
(float64 rounding in Horner's rule adds about that many units of 2**-53).

    python tools/fit_activations.py            # needs mpmath
"""
import struct

import mpmath as mp

mp.mp.dps = 50
NODES = 64


def phi(x):
    return mp.npdf(x)


def Phi(x):
    return mp.ncdf(x)


def gelu_grad(x):
    return Phi(x) + x * phi(x)


X0 = mp.findroot(gelu_grad, mp.mpf("-0.75"))      # the minimum of gelu, where gelu' = 0


def q_of_s(s):
    """(Phi(x) - 1/2) / x as a function of s = x**2."""
    if s == 0:
        return 1 / mp.sqrt(2 * mp.pi)
    return mp.erf(mp.sqrt(s / 2)) / (2 * mp.sqrt(s))


def m_of_a(a):
    """The Mills ratio times a: a * Phi(-a) / phi(a), for a > 0."""
    return a * mp.ncdf(-a) / mp.npdf(a)


# name, function of the evaluation variable t, interval of t, degree, what t is
FITS = [
    ("mc_act_q_", lambda t: q_of_s(4 * (t + 1)), (-1, 1), 16,
     "Q(t), t = x*x / 4 - 1, x*x in [0, 8]: (Phi(x) - 1/2) / x"),
    ("mc_act_m_", lambda t: m_of_a((8 + 2 * t) / (1 - t)), (mp.mpf("-1.08"), mp.mpf("0.77")), 18,
     "M(t), t = (a - 8) / (a + 2), a = |x| in [2 sqrt 2, 40]: a Phi(-a) / phi(a)"),
    ("mc_act_r_", lambda t: gelu_grad((t - 3) / 4) / ((t - 3) / 4 - X0), (-1, 1), 12,
     "R(t), t = 4 x + 3, x in [-1, -1/2]: gelu'(x) / (x - x0)"),
]


# the float32 fits: coefficients rounded to float32 (the report's fit error includes that)
FITS_F32 = [
    ("mc_act_exp16_c_", mp.exp, (mp.mpf("-0.35"), mp.mpf("0.35")), 6,
     "e**r, |r| <= ln2 / 2 (plus rounding)"),
    ("mc_act_q16_", lambda t: q_of_s(2 * (t + 1)), (-1, 1), 7,
     "Q(t), t = x*x / 2 - 1, x*x in [0, 4]: (Phi(x) - 1/2) / x"),
    ("mc_act_m16_", lambda t: m_of_a((5 + t) / (1 - t)) / mp.sqrt(2 * mp.pi),
     (-1, mp.mpf(9) / 15), 8,
     "M(t) / sqrt(2 pi), t = (a - 5) / (a + 1), a = |x| in [2, 14]: a Phi(-a) / exp(-a*a / 2)"),
]


def to_float32(v):
    """v rounded to the nearest float32 (ties to even), as a Python float."""
    return struct.unpack("f", struct.pack("f", float(v)))[0]


def cheb_coeffs(f, lo, hi, n=NODES):
    nodes = [mp.cos(mp.pi * (k + mp.mpf(1) / 2) / n) for k in range(n)]
    vals = [f((hi - lo) / 2 * u + (hi + lo) / 2) for u in nodes]
    c = [2 * mp.fsum(vals[k] * mp.cos(mp.pi * j * (k + mp.mpf(1) / 2) / n) for k in range(n)) / n
         for j in range(n)]
    c[0] /= 2
    return c


def to_monomials(c, deg, lo, hi):
    """Coefficients a_j of sum_k c_k T_k(u), u = (2 t - lo - hi) / (hi - lo), as powers of t."""
    # T_k as polynomials in u
    tk = [[mp.mpf(1)], [mp.mpf(0), mp.mpf(1)]]
    for k in range(2, deg + 1):
        nxt = [mp.mpf(0)] + [2 * v for v in tk[k - 1]]
        for i, v in enumerate(tk[k - 2]):
            nxt[i] -= v
        tk.append(nxt)
    in_u = [mp.mpf(0)] * (deg + 1)
    for k in range(deg + 1):
        for i, v in enumerate(tk[k]):
            in_u[i] += c[k] * v
    # u = alpha t + beta
    alpha, beta = 2 / (hi - lo), -(hi + lo) / (hi - lo)
    out = [mp.mpf(0)] * (deg + 1)
    for i, v in enumerate(in_u):         # v * (alpha t + beta)**i
        for j in range(i + 1):
            out[j] += v * mp.binomial(i, j) * alpha ** j * beta ** (i - j)
    return out


def report(name, f, lo, hi, deg, what, single=False):
    lo, hi = mp.mpf(lo), mp.mpf(hi)
    c = cheb_coeffs(f, lo, hi)
    a = [to_float32(v) if single else float(v) for v in to_monomials(c, deg, lo, hi)]
    worst, cond = 0, 0
    for i in range(4001):
        t = lo + (hi - lo) * i / 4000
        p = mp.fsum(mp.mpf(a[j]) * t ** j for j in range(deg + 1))
        ref = f(t)
        worst = max(worst, abs(p / ref - 1))
        cond = max(cond, mp.fsum(abs(mp.mpf(a[j]) * t ** j) for j in range(deg + 1)) / abs(p))
    print(f"/* {what};\n * degree {deg}, fit error {float(worst):.1e} (relative), "
          f"Horner condition {float(cond):.2f}, first dropped Chebyshev term "
          f"{float(abs(c[deg + 1])):.1e} */")
    print(f"static const {'float' if single else 'double'} {name}[{deg + 1}] = {{")
    for v in a:
        print(f"    {v!r}{'f' if single else ''},")
    print("};")


if __name__ == "__main__":
    x0 = X0
    hi = float(x0)
    lo = float(x0 - mp.mpf(hi))
    print(f"/* x0 = {mp.nstr(x0, 30)} = X0_HI + X0_LO */")
    print(f"#define MC_ACT_X0_HI {hi!r}\n#define MC_ACT_X0_LO {lo!r}")
    for name, f, (lo, hi), deg, what in FITS:
        report(name, f, lo, hi, deg, what)
    for name, f, (lo, hi), deg, what in FITS_F32:
        report(name, f, lo, hi, deg, what, single=True)
