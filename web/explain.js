// Why one plan beat another: cost ratios and how the optimizer breaks ties.
//
// The optimizer ranks alternatives by (total cost, flops, floats moved) and
// keeps the first of equal ones in a fixed order: the plan of its
// unrestricted extraction first, then the best plans restricted to
// broadcast-left, broadcast-right, co-partitioned and replicated joins
// (optimizer/src/optimize.rs, Cost::key in cost.rs). Within one extraction, of
// equally cheap operators the first found in the e-graph's order stays
// (extract.rs keeps a choice unless another is strictly cheaper). So a tie is
// always broken the same way for the same program.

import {si} from "./util.js";

/** Whether two costs tie on their total, compared exactly as the optimizer compares them. */
export function sameTotal(a, b) {
  return Number(a.total) === Number(b.total);
}

/**
 * How the optimizer preferred cost `win` over the tied cost `lose`, or null
 * when the totals differ: {by: "flops" | "floats" | "order", short, text}.
 * `short` completes "the winner has …"; `text` is a sentence.
 */
export function tieBreak(win, lose) {
  if (!sameTotal(win, lose)) return null;
  const f = (c) => Number(c.flops) || 0, m = (c) => Number(c.network_floats) || 0;
  if (f(win) !== f(lose)) {
    const short = `fewer flops (${si(f(win))} against ${si(f(lose))})`;
    return {by: "flops", short, text: `Equal costs are broken by flops: the chosen plan does ${si(f(win))} flops against ${si(f(lose))}`};
  }
  if (m(win) !== m(lose)) {
    const short = `fewer floats moved (${si(m(win))} against ${si(m(lose))})`;
    return {by: "floats", short, text: `Equal costs and flops are broken by floats moved: the chosen plan moves ${si(m(win))} floats against ${si(m(lose))}`};
  }
  return {by: "order", short: "the first place in the optimizer's fixed order (same flops, same floats moved)",
    text: "Nothing separates them (same floats moved, same flops), so the optimizer keeps the first in its fixed order: " +
      "the plan of its unrestricted search comes before the plans restricted to one join strategy. The same program always gets the same plan"};
}

/** "1.50×", "1.004×" (never a misleading "1.00×" for a plan that costs more), or "the same". */
export function ratioText(cost, best) {
  const a = Number(cost.total), b = Number(best.total);
  if (sameTotal(cost, best)) return "the same cost";
  if (!(b > 0)) return "more";
  const r = a / b;
  const s = r.toFixed(2);
  if (s === "1.00") return (r < 1.001 ? r.toFixed(4) : r.toFixed(3)) + "×";
  return s + "×";
}

/** The strategy acronym at the head of a label ("CMM — …" → "CMM"), or null. */
export function acronym(label) {
  const m = String(label || "").match(/^([A-Z]{2,})\b/);
  return m ? m[1] : null;
}

/** Relative gap under which the time model does not tell two plans apart (the server's
 * `TIME_RESOLUTION`): among such plans it chooses the one whose kernels move the fewest bytes. */
export const TIME_RESOLUTION = 0.05;

/** Under the time model, an alternative predicted faster than the chosen plan, yet within the
 * model's resolution: the words that say why it was not chosen, or null. */
export function closeCall(cost, chosen, timeModel) {
  const a = Number(cost.total), b = Number(chosen.total);
  if (!timeModel || !(a < b) || sameTotal(cost, chosen)) return null;
  const pct = Math.round(TIME_RESOLUTION * 100);
  return {
    short: `within ${pct}% — the chosen plan moves fewer bytes through memory`,
    text: `Predicted ${ratioText(cost, chosen)} the chosen plan's time: within the time model's ${pct}% resolution, `
      + `so the two are not told apart, and the chosen plan's kernels move fewer bytes through memory `
      + `(intermediates it does not write out cost time no stage figure shows).`,
  };
}
