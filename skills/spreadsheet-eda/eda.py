#!/usr/bin/env python3
"""Profiles a workbook or CSV and flags anomalies. See SKILL.md."""
import argparse
import json
import math
import re
import sys

import numpy as np
import pandas as pd

SIGNED = re.compile(r"(qty|quantit|units|amount|revenue|price|sales|total|count)", re.I)
KEYLIKE = re.compile(r"(^id$|_id$|^order$|invoice)", re.I)
DATELIKE = re.compile(r"(date|day|time|month)", re.I)


def load(path, sheets):
    if path.lower().endswith((".xlsx", ".xlsm")):
        book = pd.read_excel(path, sheet_name=None)
        return {k: v for k, v in book.items() if not sheets or k in sheets}
    sep = "\t" if path.lower().endswith(".tsv") else ","
    return {path.rsplit("/", 1)[-1].rsplit(".", 1)[0]: pd.read_csv(path, sep=sep)}


def robust_z(s):
    """Robust z-scores of a column: on a log scale when it is mostly
    positive and skewed (then non-positive values are left out: negatives
    are flagged on their own)."""
    s = s.dropna().astype(float)
    if len(s) < 10:
        return None, False
    pos = s[s > 0]
    logged = bool(len(pos) >= 0.95 * len(s) and pos.skew() > 1)
    v = np.log(pos) if logged else s
    med = v.median()
    mad = (v - med).abs().median()
    if mad == 0:
        return None, logged
    return 0.6745 * (v - med) / mad, logged


def find_key(df, given):
    if given:
        return given if given in df.columns else None
    for c in df.columns:
        if KEYLIKE.search(str(c)) and df[c].nunique() > 0.9 * len(df):
            return c
    return None


def level_shifts(df, sheet, date_col, value_col, group_col, findings, skip):
    """Finds months from which a group's monthly total moves to a new
    level; rows in skip (flagged outliers and negatives) are left out of
    the totals."""
    if date_col not in df.columns or value_col not in df.columns:
        return []
    df = df.drop(index=[i for i in skip if i in df.index])
    d = df[[date_col, value_col] + ([group_col] if group_col in df.columns else [])].copy()
    d[date_col] = pd.to_datetime(d[date_col], errors="coerce")
    d = d.dropna(subset=[date_col, value_col])
    d["_month"] = d[date_col].dt.to_period("M")
    groups = d.groupby(group_col) if group_col in d.columns else [("all", d)]
    out = []
    for name, g in groups:
        series = g.groupby("_month")[value_col].sum().sort_index()
        vals = series.values.astype(float)
        if len(vals) < 6:
            continue
        # The split of the months into before and after that fits two
        # levels best (least absolute deviation from each part's median),
        # then how far apart the levels are against the spread around them:
        # medians and MAD, so that one month inflated by a huge order
        # neither hides nor fakes a shift.
        best = None
        for k in range(3, len(vals) - 2):
            a, b = vals[:k], vals[k:]
            ma, mb = np.median(a), np.median(b)
            cost = np.abs(a - ma).sum() + np.abs(b - mb).sum()
            if best is None or cost < best[0]:
                spread = 1.4826 * np.median(np.abs(np.concatenate([a - ma, b - mb]))) or 1e-9
                t = abs(mb - ma) / (spread * math.sqrt(1 / len(a) + 1 / len(b)))
                best = (cost, k, ma, mb, t)
        _, k, before, after, t = best
        change = (after - before) / before if before else 0
        if t > 9 and abs(change) > 0.25:
            month = str(series.index[k])
            detail = "%s of %s: monthly %s moves from a median of %.0f to %.0f (%+.0f%%) from %s on (t=%.1f)" % (
                group_col, name, value_col, before, after, 100 * change, month, t)
            out.append({"group": str(name), "month": month, "before": round(before, 2), "after": round(after, 2),
                        "change": round(change, 4), "t": round(t, 2)})
            findings.append({"kind": "level_shift", "sheet": sheet, "row": "", "key": str(name),
                             "column": value_col, "value": month, "detail": detail})
    return out


def profile(sheet, df, args, findings):
    p = {"sheet": sheet, "rows": int(len(df)), "columns": {str(c): str(t) for c, t in df.dtypes.items()}}
    key = find_key(df, args.key)
    keyval = (lambda i: str(df.at[i, key])) if key else (lambda i: "")
    rownum = lambda i: int(i) + 2  # the header is row 1
    missing = df.isna()
    p["missing"] = {str(c): int(n) for c, n in missing.sum().items() if n}
    for c in df.columns:
        for i in df.index[missing[c]]:
            findings.append({"kind": "missing", "sheet": sheet, "row": rownum(i), "key": keyval(i), "column": str(c),
                             "value": "", "detail": "empty cell"})
    dup = df.duplicated(keep="first")
    p["duplicate_rows"] = int(dup.sum())
    for i in df.index[dup]:
        first = df.index[(df == df.loc[i]).all(axis=1) | ((df == df.loc[i]) | (df.isna() & df.loc[i].isna())).all(axis=1)][0]
        findings.append({"kind": "duplicate", "sheet": sheet, "row": rownum(i), "key": keyval(i), "column": "",
                         "value": "", "detail": "repeats row %d exactly" % rownum(first)})
    if key:
        rest = df[~dup]
        dk = rest[key].duplicated(keep=False) & rest[key].notna()
        p["duplicate_keys"] = int(dk.sum())
        for i in rest.index[dk]:
            findings.append({"kind": "duplicate_key", "sheet": sheet, "row": rownum(i), "key": keyval(i), "column": key,
                             "value": keyval(i), "detail": "the key %s is on other rows too" % keyval(i)})
    p["numeric"] = {}
    skip = set()
    for c in df.select_dtypes("number").columns:
        s = df[c]
        z, logged = robust_z(s)
        info = {"min": float(s.min()), "median": float(s.median()), "max": float(s.max()), "log_scale": logged}
        if z is not None:
            out = z[z.abs() > args.z]
            info["outliers"] = int(len(out))
            for i in out.index:
                skip.add(i)
                findings.append({"kind": "outlier", "sheet": sheet, "row": rownum(i), "key": keyval(i), "column": str(c),
                                 "value": s[i], "detail": "robust z %.1f (median %g)" % (z[i], s.median())})
        if SIGNED.search(str(c)):
            neg = s[s < 0]
            info["negative"] = int(len(neg))
            for i in neg.index:
                skip.add(i)
                findings.append({"kind": "negative", "sheet": sheet, "row": rownum(i), "key": keyval(i), "column": str(c),
                                 "value": s[i], "detail": "negative %s" % c})
        p["numeric"][str(c)] = info
    date_col = args.date or next((c for c in df.columns if DATELIKE.search(str(c)) and
                                  pd.to_datetime(df[c], errors="coerce").notna().mean() > 0.9), None)
    value_col = args.value or next((c for c in df.select_dtypes("number").columns if re.search("revenue|sales|amount", str(c), re.I)), None)
    group_col = args.group or next((c for c in df.columns if re.search("region|segment|store|country", str(c), re.I)), None)
    if date_col is not None and value_col is not None:
        p["level_shifts"] = level_shifts(df, sheet, date_col, value_col, group_col, findings, skip)
    return p


def main():
    ap = argparse.ArgumentParser(description="Profile a workbook or CSV and flag anomalies.")
    ap.add_argument("input")
    ap.add_argument("--sheet", action="append", default=[])
    ap.add_argument("--key")
    ap.add_argument("--date")
    ap.add_argument("--value")
    ap.add_argument("--group")
    ap.add_argument("--z", type=float, default=6.0)
    ap.add_argument("--csv", help="write the findings here")
    ap.add_argument("--json", help="write the profile and the findings here")
    args = ap.parse_args()
    try:
        sheets = load(args.input, set(args.sheet))
    except Exception as e:
        sys.exit("eda: cannot read %s: %s" % (args.input, e))
    findings, profiles = [], []
    for name, df in sheets.items():
        before = len(findings)
        p = profile(name, df, args, findings)
        profiles.append(p)
        kinds = pd.Series([f["kind"] for f in findings[before:]], dtype=object).value_counts().to_dict()
        print("sheet %s: %d rows x %d columns" % (name, p["rows"], len(p["columns"])))
        print("  columns: " + ", ".join("%s (%s)" % (c, t) for c, t in p["columns"].items()))
        print("  flagged: " + (", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items())) or "nothing"))
        for f in findings[before:][:40]:
            print("    %-13s row %-5s %-10s %-10s %s" % (f["kind"], f["row"], f["key"], f["column"], f["detail"]))
        if len(findings) - before > 40:
            print("    … %d more (see --csv)" % (len(findings) - before - 40))
    if args.csv:
        pd.DataFrame(findings, columns=["kind", "sheet", "row", "key", "column", "value", "detail"]).to_csv(args.csv, index=False)
        print("wrote %d findings to %s" % (len(findings), args.csv))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sheets": profiles, "findings": findings}, f, indent=2, default=str)
        print("wrote the profile to %s" % args.json)


if __name__ == "__main__":
    main()
