package excelreport_test

// The model's code in the scenario: four cells of one python context, in
// order, each using what the ones before it left (orders, flags, anoms,
// out, med).

// cellLoad reads the workbook and the profile the spreadsheet-eda skill
// wrote.
const cellLoad = `import pandas as pd
orders = pd.read_excel("/workspace/input/sales.xlsx", sheet_name="Orders")
flags = pd.read_csv("/tmp/eda.csv")
print(orders.shape)
print(flags["kind"].value_counts().to_string())
orders.head(3)
`

// cellAnomalies puts the anomalies in one table, checking the profile's
// leads with pandas, and saves it as anomalies.csv.
const cellAnomalies = `rows = []
def add(kind, order_id, column, value, detail):
    rows.append({"kind": kind, "order_id": order_id, "column": column, "value": value, "detail": detail})

# Outliers: the profile's robust z-scores, checked against the median order.
med = orders["quantity"].median()
for _, f in flags[flags.kind == "outlier"].iterrows():
    q = orders.loc[orders.order_id == f.key, "quantity"].iloc[0]
    if q > 10 * med:
        add("outlier", f.key, f.column, q, "quantity %g is %.0fx the median order (%g)" % (q, q / med, med))
# Duplicated orders: the same row entered twice.
for _, r in orders[orders.duplicated(keep="first")].iterrows():
    add("duplicate", r.order_id, "", "", "entered twice: the rows are identical")
# Missing values, cell by cell.
for col in orders.columns:
    for oid in orders.loc[orders[col].isna(), "order_id"]:
        add("missing", oid, col, "", "empty %s" % col)
# Negative quantities.
for _, r in orders[orders.quantity < 0].iterrows():
    add("negative_quantity", r.order_id, "quantity", r.quantity, "quantity %g, revenue %.2f" % (r.quantity, r.revenue))
# Level shifts, from the profile of monthly revenue by region.
for _, f in flags[flags.kind == "level_shift"].iterrows():
    add("level_shift", f.key, f.column, f.value, f.detail)
anoms = pd.DataFrame(rows)
anoms.to_csv("/workspace/output/anomalies.csv", index=False)
print(anoms.kind.value_counts().to_string())
`

// cellCharts draws one chart per kind of anomaly; the last stays open, so
// that it comes back as an image.
const cellCharts = `import matplotlib.pyplot as plt
orders["date"] = pd.to_datetime(orders["date"])
out = "/workspace/output/"
def save(fig, name):
    fig.tight_layout()
    fig.savefig(out + name, dpi=100)

fig, ax = plt.subplots(figsize=(8, 4.5))
hit = orders.order_id.isin(anoms[anoms.kind == "outlier"].order_id)
ax.scatter(orders.date[~hit], orders.quantity[~hit], s=4, color="#9aa5b1", label="orders")
ax.scatter(orders.date[hit], orders.quantity[hit], s=50, color="#d1495b", label="outliers")
ax.set_yscale("symlog"); ax.set_ylabel("quantity"); ax.set_title("Order quantities"); ax.legend()
save(fig, "outliers.png"); plt.close(fig)

fig, ax = plt.subplots(figsize=(8, 4.5))
dups = orders[orders.order_id.isin(anoms[anoms.kind == "duplicate"].order_id)].groupby("order_id").size()
ax.bar(dups.index, dups.values, color="#edae49"); ax.set_ylabel("rows"); ax.set_title("Orders entered more than once")
save(fig, "duplicates.png"); plt.close(fig)

fig, ax = plt.subplots(figsize=(8, 4.5))
miss = orders.isna().sum()
ax.bar(miss.index, miss.values, color="#00798c"); ax.set_ylabel("empty cells"); ax.set_title("Missing values by column")
ax.tick_params(axis="x", rotation=30)
save(fig, "missing.png"); plt.close(fig)

fig, ax = plt.subplots(figsize=(8, 4.5))
neg = orders[orders.quantity < 0]
ax.bar(neg.order_id, neg.quantity, color="#d1495b"); ax.axhline(0, color="black", lw=0.8)
ax.set_ylabel("quantity"); ax.set_title("Orders with a negative quantity (median order: %g)" % med)
save(fig, "negative.png"); plt.close(fig)

monthly = orders[~hit].dropna(subset=["region", "revenue"]).groupby([orders.date.dt.to_period("M"), "region"]).revenue.sum().unstack()
fig, ax = plt.subplots(figsize=(8, 4.5))
for region in monthly.columns:
    ax.plot(monthly.index.astype(str), monthly[region] / 1000, lw=3 if region == "West" else 1.2,
            color="#d1495b" if region == "West" else None, label=region)
shift = anoms[anoms.kind == "level_shift"]
for m in shift.value:
    ax.axvline(str(m), color="#d1495b", ls="--")
ax.set_ylabel("revenue, thousands"); ax.set_title("Monthly revenue by region"); ax.legend(ncol=5, fontsize=8)
ax.tick_params(axis="x", rotation=45)
save(fig, "level_shift.png")
print(sorted(p for p in __import__("os").listdir(out) if p.endswith(".png")))
`

// cellOutline writes the deck's outline for the pptx skill.
const cellOutline = `import json
kinds = [("outlier", "Outliers", "outliers.png"), ("duplicate", "Duplicated orders", "duplicates.png"),
         ("missing", "Missing values", "missing.png"), ("negative_quantity", "Negative quantities", "negative.png"),
         ("level_shift", "Level shift", "level_shift.png")]
slides = []
for kind, title, png in kinds:
    a = anoms[anoms.kind == kind]
    bullets = ["%d found" % len(a)] + ["  %s: %s" % (r.order_id, r.detail) for r in a.head(3).itertuples()]
    slides.append({"title": title, "bullets": bullets, "image": out + png})
slides.append({"title": "Summary", "bullets": ["%d anomalies among %d orders" % (len(anoms), len(orders))] +
               ["%s: %d" % (title, (anoms.kind == kind).sum()) for kind, title, _ in kinds] + ["Details: anomalies.csv"]})
json.dump({"title": "Sales 2024: anomalies", "subtitle": "sales.xlsx, sheet Orders", "slides": slides}, open("/tmp/outline.json", "w"), indent=1)
print(len(slides) + 1, "slides in /tmp/outline.json")
`
