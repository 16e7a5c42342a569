#!/usr/bin/env node
// Builds a .pptx deck from a JSON outline with pptxgenjs. See SKILL.md.
'use strict';

const fs = require('fs');
const path = require('path');

let PptxGenJS;
try {
  PptxGenJS = require('pptxgenjs');
} catch (e) {
  PptxGenJS = require('/usr/local/lib/node_modules/pptxgenjs');
}

function fail(msg) {
  process.stderr.write('build_deck: ' + msg + '\n');
  process.exit(2);
}

// imageSize reads the pixel size of a PNG or JPEG from its header.
function imageSize(file) {
  const b = fs.readFileSync(file);
  if (b.length > 24 && b.readUInt32BE(0) === 0x89504e47) {
    return { w: b.readUInt32BE(16), h: b.readUInt32BE(20) };
  }
  if (b.length > 4 && b[0] === 0xff && b[1] === 0xd8) {
    let i = 2;
    while (i + 9 < b.length) {
      if (b[i] !== 0xff) { i++; continue; }
      const marker = b[i + 1];
      const len = b.readUInt16BE(i + 2);
      if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
        return { w: b.readUInt16BE(i + 7), h: b.readUInt16BE(i + 5) };
      }
      i += 2 + len;
    }
  }
  fail(file + ': not a PNG or JPEG image');
}

// fit places an image of w×h pixels inside a box, keeping its ratio.
function fit(size, box) {
  const r = Math.min(box.w / size.w, box.h / size.h);
  const w = size.w * r, h = size.h * r;
  return { x: box.x + (box.w - w) / 2, y: box.y + (box.h - h) / 2, w, h };
}

function str(v, where) {
  if (typeof v !== 'string') fail(where + ' must be a string');
  return v;
}

function main() {
  const [outlinePath, outPath] = process.argv.slice(2);
  if (!outlinePath || !outPath) fail('usage: build_deck.js OUTLINE.json OUT.pptx');
  if (!outPath.endsWith('.pptx')) fail('the deck\'s name must end in .pptx');
  let outline;
  try {
    outline = JSON.parse(fs.readFileSync(outlinePath, 'utf8'));
  } catch (e) {
    fail(outlinePath + ': ' + e.message);
  }
  if (!outline || typeof outline !== 'object') fail('the outline must be a JSON object');
  const slides = outline.slides || [];
  if (!Array.isArray(slides)) fail('"slides" must be a list');

  const pres = new PptxGenJS();
  pres.layout = 'LAYOUT_16x9'; // 10 x 5.625 inches
  pres.title = str(outline.title || '', 'title');
  pres.author = 'airlock agent';
  const dark = '1F3A5F', accent = '2E86AB', grey = '5A6470';

  const t = pres.addSlide();
  t.background = { color: dark };
  t.addText(str(outline.title || fail('the outline needs a "title"'), 'title'), { x: 0.6, y: 1.6, w: 8.8, h: 1.2, fontSize: 36, bold: true, color: 'FFFFFF', fontFace: 'Arial' });
  if (outline.subtitle) {
    t.addText(str(outline.subtitle, 'subtitle'), { x: 0.6, y: 2.9, w: 8.8, h: 0.8, fontSize: 18, color: 'D0DCE8', fontFace: 'Arial' });
  }
  console.log('slide 1: title: ' + outline.title);

  let images = 0;
  slides.forEach((s, i) => {
    const where = 'slide ' + (i + 1);
    if (!s || typeof s !== 'object') fail(where + ' must be an object');
    const slide = pres.addSlide();
    slide.addText(str(s.title || fail(where + ' needs a "title"'), where + ' title'), { x: 0.5, y: 0.25, w: 9, h: 0.7, fontSize: 26, bold: true, color: dark, fontFace: 'Arial' });
    slide.addShape(pres.shapes.RECTANGLE, { x: 0.5, y: 0.95, w: 1.2, h: 0.06, fill: { color: accent }, line: { color: accent } });
    const bullets = s.bullets || [];
    if (!Array.isArray(bullets)) fail(where + ': "bullets" must be a list');
    const hasImage = s.image !== undefined && s.image !== null && s.image !== '';
    const body = { x: 0.5, y: 1.2, w: 9, h: 4.1 };
    if (bullets.length) {
      const box = hasImage ? { x: 0.5, y: 1.2, w: 3.9, h: 4.1 } : body;
      slide.addText(bullets.map((b) => {
        const text = str(b, where + ' bullet');
        const sub = text.startsWith('  ');
        return { text: text.trim(), options: { bullet: true, indentLevel: sub ? 1 : 0, fontSize: sub ? 14 : 17, color: sub ? grey : '222222', breakLine: true } };
      }), { ...box, valign: 'top', fontFace: 'Arial', paraSpaceAfter: 6 });
    }
    if (hasImage) {
      const file = str(s.image, where + ' image');
      if (!fs.existsSync(file)) fail(where + ': image ' + file + ' does not exist');
      const box = bullets.length ? { x: 4.6, y: 1.2, w: 4.9, h: 4.1 } : body;
      slide.addImage({ path: file, ...fit(imageSize(file), box) });
      images++;
    }
    if (s.table) {
      if (!Array.isArray(s.table) || !s.table.every(Array.isArray)) fail(where + ': "table" must be a list of rows');
      const rows = s.table.map((row, r) => row.map((c) => ({ text: String(c), options: r === 0 ? { bold: true, color: 'FFFFFF', fill: { color: accent } } : {} })));
      const y = bullets.length || hasImage ? 3.4 : 1.3;
      slide.addTable(rows, { x: 0.5, y, w: 9, fontSize: 12, fontFace: 'Arial', border: { type: 'solid', pt: 0.5, color: 'BBBBBB' }, autoPage: false });
    }
    if (s.notes) slide.addNotes(str(s.notes, where + ' notes'));
    console.log('slide ' + (i + 2) + ': ' + s.title + (hasImage ? ' (image ' + path.basename(s.image) + ')' : ''));
  });

  pres.writeFile({ fileName: outPath }).then(() => {
    console.log('wrote ' + outPath + ': ' + (slides.length + 1) + ' slides, ' + images + ' images');
  }).catch((e) => fail('writing ' + outPath + ': ' + e.message));
}

main();
