"""Paired ratios of a side-by-side benchmark: is a gap the tool's, or the machine's noise?

Each pair is one run of netsteer and one of the anchor, back to back, in alternating order, so
a pair's ratio cancels drift slower than a pair. What remains is run-to-run noise, which on a
shared VM is often wider than the gap being judged. The median's confidence interval below is
distribution-free (order statistics of the pair ratios, a sign-test interval): it needs no
assumption about the shape of that noise, only that pairs are independent.

A cell then reads one of three ways:
  met     the median meets the target (at two decimals, as the scripts print it);
  parity  the median misses, but the interval still reaches the target: this many pairs
          cannot tell the gap from noise;
  missed  the whole interval is on the wrong side: a real gap.
"""

from math import comb
import statistics

# Below this many pairs no order-statistic interval reaches 95 % (5 pairs: 93.75 %).
MIN_PAIRS = 6


def median_ci(values, level=0.95):
    """The widest-rank interval [x(k), x(n+1-k)] whose coverage of the median is >= level.

    Coverage of ranks k..n+1-k is 1 - 2 * P(Binomial(n, 1/2) < k). None below MIN_PAIRS.
    """
    v = sorted(values)
    n = len(v)
    if n < MIN_PAIRS:
        return None
    k, below = 0, 0.0
    while True:
        # P(Binomial(n, 1/2) <= k), the tail that rank k + 1 would leave outside.
        below += comb(n, k) / 2**n
        if 1 - 2 * below < level:
            break
        k += 1
    # k ranks can be cut from each end (k >= 1 since n >= MIN_PAIRS).
    return v[k - 1], v[n - k]


def verdict(values, good):
    """'met', 'parity' or 'missed' (see the module's text); good(x) says x meets the target."""
    if good(round(statistics.median(values), 2)):
        return "met"
    ci = median_ci(values)
    if ci is None:
        return "missed (too few pairs for an interval)"
    return "parity" if good(round(ci[0], 2)) or good(round(ci[1], 2)) else "missed"


def mmm(values, fmt="{:.2f}"):
    """min/median/max of `values`, each formatted with `fmt`: every table cell of the scripts."""
    return "/".join(fmt.format(x) for x in (min(values), statistics.median(values), max(values)))


def cell(values, good):
    """min/median/max (pairs that met the target by themselves) [95 % interval of the median]."""
    v = sorted(values)
    s = mmm(v)
    s += f" ({sum(1 for x in v if good(round(x, 2)))}/{len(v)})"
    ci = median_ci(v)
    if ci is not None:
        s += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return s


class Judge:
    """Collects the verdicts of a script's judged cells and prints them at the end."""

    def __init__(self):
        self.verdicts = []

    def cell(self, values, good, name):
        """pairs.cell(values, good), with the cell's verdict kept under `name`."""
        self.verdicts.append((name, verdict(values, good)))
        return cell(values, good)

    def report(self, targets):
        """The verdict counts after `targets` (what was judged), then every cell not met."""
        if not self.verdicts:
            return
        count = lambda w: sum(1 for _, v in self.verdicts if v.startswith(w))
        print(f"targets (median at two decimals): {targets}: met {count('met')}, parity "
              f"{count('parity')} (gap within the pairs' noise), missed {count('missed')} of "
              f"{len(self.verdicts)} cells")
        for name, v in self.verdicts:
            if v != "met":
                print(f"  {v}: {name}")


def _self_test():
    # n = 6: only [x(1), x(6)] covers >= 95 % (1 - 2/64 = 96.9 %).
    assert median_ci([6, 1, 5, 2, 4, 3]) == (1, 6)
    # n = 15: ranks 4..12 cover 96.5 %, ranks 5..11 only 88.2 %.
    assert median_ci(range(1, 16)) == (4, 12)
    # n = 20: ranks 6..15 (95.9 %).
    assert median_ci(range(1, 21)) == (6, 15)
    assert median_ci([1, 2, 3, 4, 5]) is None
    assert mmm([3, 1, 2]) == "1.00/2.00/3.00"
    assert mmm([0.5, 1.25], "{:.1f}") == "0.5/0.9/1.2"
    le1 = lambda x: x <= 1.0
    assert verdict([0.9, 0.95, 1.0, 0.97, 0.99, 1.1], le1) == "met"
    assert verdict([0.9, 1.02, 1.03, 1.04, 1.05, 1.1], le1) == "parity"
    assert verdict([1.01, 1.02, 1.03, 1.04, 1.05, 1.1], le1) == "missed"
    j = Judge()
    assert j.cell([0.9, 1.02, 1.03, 1.04, 1.05, 1.1], le1, "x") == "0.90/1.04/1.10 (1/6) [0.90, 1.10]"
    assert j.verdicts == [("x", "parity")]
    print("pairs.py: ok")


if __name__ == "__main__":
    _self_test()
