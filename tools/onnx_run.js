// Runs an ONNX model with onnxruntime (npm's onnxruntime-node, CPU), the
// reference that Ember's ONNX export and import are checked against.
// usage: node tools/onnx_run.js MODEL.onnx INPUTS.safetensors OUTPUTS.safetensors
//
// Every tensor of INPUTS is fed to the model input of the same name, and
// every graph output is written to OUTPUTS under its own name. onnxruntime-node
// is found in $EMBER_NPM_DIR when set, else in .cache/npm/node_modules beside
// this directory (where scripts/setup.sh installs it).
//
// Types: safetensors F32 F64 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL, as
// onnxruntime's float/double/float16/int64 ... tensors (BF16 only where
// onnxruntime-node has it: it does not, so BF16 is refused). Ember holds every
// ONNX integer type as int64 (onnx/import_ops.h), so an integer tensor is cast
// to the integer type the model input declares when they differ (a value that
// does not fit is an error), and with --int64 (first argument) every integer
// output is written as I64, which Ember's safetensors reader can load.
//
// Any failure (a missing or malformed file, an unknown dtype, a model input
// missing from INPUTS or a tensor of INPUTS the model does not take,
// onnxruntime's own error) prints one line to stderr and exits 1.
'use strict';
const fs = require('fs');
const path = require('path');

class Failure extends Error {}
const fail = (msg) => {
  throw new Failure(msg);
};

// safetensors dtype <-> onnxruntime's tensor type, its typed array and element size.
const DTYPES = {
  F32: {ort: 'float32', array: Float32Array, size: 4},
  F64: {ort: 'float64', array: Float64Array, size: 8},
  // onnxruntime-node holds float16 as raw bits in a Uint16Array (Node 20 has no Float16Array).
  F16: {ort: 'float16', array: Uint16Array, size: 2},
  I64: {ort: 'int64', array: BigInt64Array, size: 8},
  I32: {ort: 'int32', array: Int32Array, size: 4},
  I16: {ort: 'int16', array: Int16Array, size: 2},
  I8: {ort: 'int8', array: Int8Array, size: 1},
  U64: {ort: 'uint64', array: BigUint64Array, size: 8},
  U32: {ort: 'uint32', array: Uint32Array, size: 4},
  U16: {ort: 'uint16', array: Uint16Array, size: 2},
  U8: {ort: 'uint8', array: Uint8Array, size: 1},
  BOOL: {ort: 'bool', array: Uint8Array, size: 1},
};
const FROM_ORT = Object.fromEntries(Object.entries(DTYPES).map(([k, v]) => [v.ort, k]));
const INTS = new Set(['I64', 'I32', 'I16', 'I8', 'U64', 'U32', 'U16', 'U8']);
// Each integer type's range, for the casts between them.
const RANGE = {
  I64: [-(2n ** 63n), 2n ** 63n - 1n],
  I32: [-(2n ** 31n), 2n ** 31n - 1n],
  I16: [-(2n ** 15n), 2n ** 15n - 1n],
  I8: [-128n, 127n],
  U64: [0n, 2n ** 64n - 1n],
  U32: [0n, 2n ** 32n - 1n],
  U16: [0n, 2n ** 16n - 1n],
  U8: [0n, 255n],
};

function readSafetensors(file) {
  let buf;
  try {
    buf = fs.readFileSync(file);
  } catch (e) {
    fail(`cannot read ${file}: ${e.code || e.message}`);
  }
  if (buf.length < 8) fail(`${file}: truncated (${buf.length} bytes, shorter than the 8-byte header length)`);
  const hlen = buf.readBigUInt64LE(0);
  if (hlen > BigInt(buf.length - 8)) fail(`${file}: header length ${hlen} exceeds the file's ${buf.length} bytes`);
  const dataStart = 8 + Number(hlen);
  let header;
  try {
    header = JSON.parse(buf.subarray(8, dataStart).toString('utf-8'));
  } catch (e) {
    fail(`${file}: invalid JSON header: ${e.message}`);
  }
  if (header === null || typeof header !== 'object' || Array.isArray(header)) fail(`${file}: the header is not an object`);
  const tensors = {};
  for (const [name, e] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    if (!e || typeof e.dtype !== 'string' || !Array.isArray(e.shape) || !Array.isArray(e.data_offsets))
      fail(`${file}: tensor '${name}': expected {"dtype", "shape", "data_offsets"}`);
    const dt = DTYPES[e.dtype];
    if (!dt) fail(`${file}: tensor '${name}': dtype ${e.dtype} is not one onnxruntime-node takes (${Object.keys(DTYPES).join(' ')})`);
    if (!e.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) fail(`${file}: tensor '${name}': bad shape ${JSON.stringify(e.shape)}`);
    const numel = e.shape.reduce((a, b) => a * b, 1);
    const [begin, end] = e.data_offsets;
    if (!Number.isSafeInteger(begin) || !Number.isSafeInteger(end) || begin < 0 || end < begin || dataStart + end > buf.length)
      fail(`${file}: tensor '${name}': data_offsets ${JSON.stringify(e.data_offsets)} out of the file`);
    if (end - begin !== numel * dt.size)
      fail(`${file}: tensor '${name}': ${end - begin} bytes for ${e.dtype} of shape ${JSON.stringify(e.shape)}`);
    // Copied into a fresh buffer: the typed array needs its element alignment.
    const bytes = new Uint8Array(end - begin);
    bytes.set(buf.subarray(dataStart + begin, dataStart + end));
    tensors[name] = {dtype: e.dtype, shape: e.shape, data: new dt.array(bytes.buffer)};
  }
  return tensors;
}

function writeSafetensors(file, tensors, metadata) {
  const header = {__metadata__: metadata};
  const blobs = [];
  let offset = 0;
  for (const [name, t] of Object.entries(tensors)) {
    const b = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    header[name] = {dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + b.length]};
    blobs.push(b);
    offset += b.length;
  }
  let h = JSON.stringify(header);
  h += ' '.repeat((8 - (Buffer.byteLength(h) % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(Buffer.byteLength(h)));
  // Written beside the target and renamed over it, so a reader never sees half a file.
  const tmp = `${file}.tmp.${process.pid}`;
  try {
    fs.writeFileSync(tmp, Buffer.concat([len, Buffer.from(h, 'utf-8'), ...blobs]));
    fs.renameSync(tmp, file);
  } catch (e) {
    fail(`cannot write ${file}: ${e.code || e.message}`);
  }
}

// An integer tensor as integer type `to`, each value checked against its range.
function castInt(t, to, what) {
  const [lo, hi] = RANGE[to];
  const out = new DTYPES[to].array(t.data.length);
  const big = out instanceof BigInt64Array || out instanceof BigUint64Array;
  for (let i = 0; i < t.data.length; ++i) {
    const v = BigInt(t.data[i]);
    if (v < lo || v > hi) fail(`${what}: value ${v} does not fit ${to}`);
    out[i] = big ? v : Number(v);
  }
  return {dtype: to, shape: t.shape, data: out};
}

async function main(argv) {
  let int64 = false;
  if (argv[0] === '--int64') {
    int64 = true;
    argv = argv.slice(1);
  }
  if (argv.length !== 3) {
    console.error('usage: node tools/onnx_run.js [--int64] MODEL.onnx INPUTS.safetensors OUTPUTS.safetensors');
    process.exit(1);
  }
  const [model, inFile, outFile] = argv;
  const npm = process.env.EMBER_NPM_DIR || path.join(__dirname, '..', '.cache', 'npm', 'node_modules');
  let ort;
  try {
    ort = require(path.resolve(npm, 'onnxruntime-node'));
  } catch (e) {
    fail(`cannot load onnxruntime-node from ${npm} (run scripts/setup.sh or set EMBER_NPM_DIR): ${e.message.split('\n')[0]}`);
  }
  if (!fs.existsSync(model)) fail(`model ${model}: no such file`);
  const inputs = readSafetensors(inFile);

  let session;
  try {
    session = await ort.InferenceSession.create(model);
  } catch (e) {
    fail(`onnxruntime cannot load ${model}: ${e.message}`);
  }
  const declared = Object.fromEntries((session.inputMetadata || []).map((m) => [m.name, m]));
  for (const name of Object.keys(inputs))
    if (!session.inputNames.includes(name))
      fail(`${inFile}: tensor '${name}' is not an input of ${model} (its inputs: ${session.inputNames.join(', ')})`);
  const feeds = {};
  for (const name of session.inputNames) {
    let t = inputs[name];
    if (!t) fail(`${model}: input '${name}' is not in ${inFile} (it holds: ${Object.keys(inputs).join(', ') || 'nothing'})`);
    const want = declared[name] && FROM_ORT[declared[name].type];
    if (want && want !== t.dtype && INTS.has(want) && INTS.has(t.dtype)) t = castInt(t, want, `${inFile}: tensor '${name}'`);
    feeds[name] = new ort.Tensor(DTYPES[t.dtype].ort, t.data, t.shape);
  }

  let results;
  try {
    results = await session.run(feeds);
  } catch (e) {
    fail(`onnxruntime failed running ${model}: ${e.message}`);
  }
  const outputs = {};
  for (const name of session.outputNames) {
    const r = results[name];
    if (!r) fail(`${model}: onnxruntime returned no output '${name}'`);
    const dtype = FROM_ORT[r.type];
    if (!dtype) fail(`${model}: output '${name}' has type ${r.type}, which a safetensors file cannot hold`);
    let t = {dtype, shape: Array.from(r.dims), data: r.data};
    if (int64 && INTS.has(dtype) && dtype !== 'I64') t = castInt(t, 'I64', `${model}: output '${name}'`);
    outputs[name] = t;
  }
  writeSafetensors(outFile, outputs, {producer: 'tools/onnx_run.js', model: path.basename(model)});
}

main(process.argv.slice(2)).catch((e) => {
  // One line: the tests show it in their exception message.
  const msg = e instanceof Failure ? e.message : `${e.stack || e}`;
  console.error(`onnx_run.js: ${msg.replace(/\s*\n\s*/g, ' | ')}`);
  process.exit(1);
});
