"""Makes a realistic sales workbook with planted anomalies, for the
excel-report example.

Run it in the sandbox, which has openpyxl:

    airlock run --image python --lang python --code make_workbook.py --output data/

It writes /workspace/output/sales.xlsx (sheets Orders, Products, Regions,
Monthly) and /workspace/output/truth.json, which lists every planted
anomaly: outliers (huge quantities), duplicated orders, missing values, a
negative quantity, and a sudden level shift in one region's revenue.
The same seed gives the same workbook.
"""
import datetime as dt
import json
import random
import sys

import openpyxl
from openpyxl.styles import Font, PatternFill
from openpyxl.utils import get_column_letter

SEED = int(sys.argv[1]) if len(sys.argv) > 1 else 7
OUT = "/workspace/output"
rng = random.Random(SEED)

PRODUCTS = [
    ("Desk lamp", "Lighting", 24.0), ("Office chair", "Furniture", 189.0),
    ("Standing desk", "Furniture", 479.0), ("Monitor 27in", "Electronics", 249.0),
    ("Keyboard", "Electronics", 59.0), ("Mouse", "Electronics", 19.0),
    ("Notebook pack", "Stationery", 12.0), ("Whiteboard", "Stationery", 89.0),
    ("Headset", "Electronics", 79.0), ("Bookshelf", "Furniture", 149.0),
]
REGIONS = {
    "North": ("Anna Berg", ["Ola N.", "Kari L.", "Per S."]),
    "South": ("Luis Ortega", ["Marta G.", "Jon A."]),
    "East": ("Mei Chen", ["Li W.", "Sun Y.", "Tao H."]),
    "West": ("Sam Carter", ["Ava R.", "Ben T."]),
    "Central": ("Eva Novak", ["Petr K.", "Jana M."]),
}
SHIFT_REGION, SHIFT_MONTH = "West", 7  # West's revenue drops from July 2024 on
MONTHS = range(1, 13)

orders = []
n = 10000
for month in MONTHS:
    for region, (_, reps) in REGIONS.items():
        count = rng.randint(60, 72)
        if region == SHIFT_REGION and month >= SHIFT_MONTH:
            count = rng.randint(38, 44)  # a lost account: fewer orders, and smaller ones
        for _ in range(count):
            n += 1
            day = rng.randint(1, 28)
            name, _, price = PRODUCTS[rng.randrange(len(PRODUCTS))]
            qty = max(1, round(rng.gauss(8, 3)))
            if region == SHIFT_REGION and month >= SHIFT_MONTH:
                qty = max(1, round(qty * 0.6))
            unit = round(price * rng.choice([1, 1, 1, 0.95, 0.9]), 2)
            orders.append({"order_id": "SO-%d" % n, "date": dt.date(2024, month, day), "region": region,
                           "sales_rep": rng.choice(reps), "product": name, "quantity": qty,
                           "unit_price": unit, "revenue": round(qty * unit, 2)})
orders.sort(key=lambda o: (o["date"], o["order_id"]))

truth = {"seed": SEED, "outliers": [], "duplicates": [], "missing": [], "negative_quantity": [],
         "level_shift": {"region": SHIFT_REGION, "month": "2024-%02d" % SHIFT_MONTH, "column": "revenue"}}
picks = rng.sample(range(len(orders)), 15)

for i, qty in zip(picks[0:3], (480, 650, 900)):  # outliers: huge orders
    o = orders[i]
    o["quantity"], o["revenue"] = qty, round(qty * o["unit_price"], 2)
    truth["outliers"].append(o["order_id"])
for i, qty in zip(picks[3:5], (-5, -12)):  # negative quantities
    o = orders[i]
    o["quantity"], o["revenue"] = qty, round(qty * o["unit_price"], 2)
    truth["negative_quantity"].append(o["order_id"])
for i, col in zip(picks[5:11], ("revenue", "revenue", "revenue", "region", "region", "quantity")):
    o = orders[i]
    o[col] = None
    truth["missing"].append({"order_id": o["order_id"], "column": col})
dups = [orders[i] for i in picks[11:15]]
for o in dups:  # the same order entered twice
    orders.insert(orders.index(o) + 1, dict(o))
    truth["duplicates"].append(o["order_id"])

wb = openpyxl.Workbook()
head = Font(bold=True, color="FFFFFF")
fill = PatternFill("solid", fgColor="1F3A5F")


def sheet(ws, header, rows, widths):
    ws.append(header)
    for c in ws[1]:
        c.font, c.fill = head, fill
    for r in rows:
        ws.append(r)
    for i, w in enumerate(widths, 1):
        ws.column_dimensions[get_column_letter(i)].width = w
    ws.freeze_panes = "A2"


ws = wb.active
ws.title = "Orders"
cols = ["order_id", "date", "region", "sales_rep", "product", "quantity", "unit_price", "revenue"]
sheet(ws, cols, ([o[c] for c in cols] for o in orders), [12, 12, 10, 12, 16, 10, 11, 12])
for row in ws.iter_rows(min_row=2):
    row[1].number_format = "yyyy-mm-dd"
    row[6].number_format = row[7].number_format = "#,##0.00"

sheet(wb.create_sheet("Products"), ["product", "category", "list_price"], PRODUCTS, [16, 12, 11])
sheet(wb.create_sheet("Regions"), ["region", "manager", "reps", "monthly_target"],
      [(r, m, len(reps), 90000 + 5000 * i) for i, (r, (m, reps)) in enumerate(REGIONS.items())], [10, 14, 6, 15])

monthly = {}
for o in orders:
    if o["region"] and o["revenue"] is not None:
        key = (o["date"].strftime("%Y-%m"), o["region"])
        monthly[key] = monthly.get(key, 0) + o["revenue"]
months = sorted({k[0] for k in monthly})
sheet(wb.create_sheet("Monthly"), ["month"] + list(REGIONS),
      ([m] + [round(monthly.get((m, r), 0), 2) for r in REGIONS] for m in months), [10] + [12] * len(REGIONS))

wb.properties.creator = "airlock example generator"
wb.save(OUT + "/sales.xlsx")
truth["rows"] = len(orders)
with open(OUT + "/truth.json", "w") as f:
    json.dump(truth, f, indent=2)
print("wrote sales.xlsx: %d orders in %d months, %d regions; planted: %d outliers, %d duplicated orders, "
      "%d missing values, %d negative quantities, a level shift in %s from %s"
      % (len(orders), len(months), len(REGIONS), len(truth["outliers"]), len(truth["duplicates"]),
         len(truth["missing"]), len(truth["negative_quantity"]), SHIFT_REGION, truth["level_shift"]["month"]))
