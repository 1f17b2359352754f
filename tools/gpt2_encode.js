// Encodes a file with npm's gpt-3-encoder (an independent JavaScript port of
// OpenAI's encoder.py) and writes the token ids, one per line, to stdout: the
// reference that Ember's GPT-2 tokenizer is checked against: one line per
// file, its ids separated by spaces (an empty line for an empty file).
// usage: node tools/gpt2_encode.js PACKAGE_DIR FILE...  (PACKAGE_DIR: .../node_modules/gpt-3-encoder)
//
// The file is read as UTF-8, as any JavaScript text is: an invalid byte
// becomes U+FFFD before the encoder sees it, so compare only valid UTF-8.
//
// gpt-3-encoder's encode() appends each word's ids with Array.concat, which
// copies the whole output every time: quadratic, minutes for a megabyte. So
// the text is handed to encode() in pieces cut after pre-tokens of its own
// pattern (read out of Encoder.js) that end in a non-space: the pattern finds
// the same pre-tokens in such a piece as in the whole text, so the ids are
// those of one call. (A cut after whitespace would not do: in "?\n\nS" the
// first \n is a pre-token only because \s+(?!\S) backs off the \n before S,
// and a piece ending "?\n\n" makes them one pre-token.)
'use strict';
const fs = require('fs');
const path = require('path');
const [dir, ...files] = process.argv.slice(2);
if (!dir || !files.length) {
  console.error('usage: node tools/gpt2_encode.js PACKAGE_DIR FILE...');
  process.exit(2);
}
const enc = require(path.resolve(dir, 'Encoder.js'));
const source = fs.readFileSync(path.resolve(dir, 'Encoder.js'), 'utf-8');
const m = source.match(/const pat = \/(.*)\/gu/);
if (!m) throw new Error('gpt2_encode.js: no pattern "const pat = /.../gu" in ' + dir + '/Encoder.js');
const pat = new RegExp(m[1], 'gu');
function encodeFile(file) {
  const text = fs.readFileSync(file, 'utf-8');
  const out = [];
  let piece = '', words = 0;
  const flush = () => {
    for (const id of enc.encode(piece)) out.push(id);
    piece = '', words = 0;
  };
  for (const w of text.matchAll(pat)) {
    piece += w[0];
    if (++words >= 256 && /\S$/u.test(w[0])) flush();
  }
  flush();
  return out;
}
for (const file of files) process.stdout.write(encodeFile(file).join(' ') + '\n');
