/* The attention explorer: the trained stage-5 GPT, run in the page.
 *
 * The forward pass below mirrors stage5_gpt/model.py line for line (GPT.forward,
 * Block, CausalSelfAttention on its explicit "trace" path, MLP, LayerNorm), for one
 * sequence (B = 1). It reads the weights that tools/docs/pages/explorer.py exported
 * from the checkpoint (docs/generated/explorer/<lang>.json and <lang>.bin: little-endian
 * float16, or float32 when the header says so) and computes in float64: the tests
 * compare its logits and attention weights with PyTorch's, run on the same exported
 * weights, to 1e-4. Nothing is fetched from outside the site.
 *
 * Markup: <div class="gpt-explorer" data-lang="en"></div>; data-compact="true" for
 * the short version. The page also gets window.gptExplorer (load, forward), which
 * the browser test uses.
 */
(function () {
  "use strict";

  const SCRIPT = document.currentScript ? document.currentScript.src : window.location.href;
  // assets/javascripts/explorer.js -> generated/explorer/
  const BASE = new URL("../../generated/explorer/", SCRIPT);
  const SHOWN = { " ": "␣", "\n": "⏎", "\t": "⇥" }; // invisible characters, made visible

  // The widget's texts: Chinese on the Chinese edition's pages (<html lang="zh">), English
  // everywhere else. The page's data-lang chooses the model, not the language of the texts.
  const UI_ZH = (document.documentElement.lang || "").toLowerCase().startsWith("zh");
  const TEXT = UI_ZH ? {
    models: { en: "英文", zh: "中文", tang: "唐诗" },
    model: "模型",
    prompt: "提示词",
    loading: (name) => `正在加载${name}模型……`,
    // A model that did not load: what failed (failed) and what to do (help); text in
    // `backticks` is shown as code. f: the LoadError (kind, file, url, status, detail); page:
    // this page's address on a local server.
    why: "原因：",
    todo: "怎么办：",
    failed: (f) => ({
      file: `本页是直接从文件系统打开的（地址以 file:// 开头），浏览器不允许这样的页面用 fetch() 读取别的文件，`
        + `所以读不到模型文件 \`${f.file}\`（\`${f.url}\`）。`,
      http: `浏览器向 \`${f.url}\` 请求模型文件 \`${f.file}\`，服务器回答 HTTP ${f.status}`
        + `${f.status === 404 ? "（没有这个文件）" : ""}。`,
      network: `浏览器向 \`${f.url}\` 请求模型文件 \`${f.file}\` 时出错，它报告的错误是 \`${f.detail}\`。`,
      damaged: `模型文件 \`${f.file}\`（\`${f.url}\`）读到了，但内容不对（\`${f.detail}\`），可能已损坏或不完整。`,
    })[f.kind],
    // what to do: a paragraph, the steps (an ordered list, maybe empty) and a last paragraph
    help: (f, page) => {
      const steps = ["运行 `make docs`（Windows 上运行 `py tasks.py docs`），它先把英文版构建到 `site/`，"
        + "再把中文版构建到 `site/zh/`；", "运行 `python -m http.server --directory site`；",
        `在浏览器里打开 \`${page}\`。`];
      const missing = "如果 `docs/generated/explorer/` 里本来就没有这个文件，先运行 `python -m tools.docs explorer` 导出模型，再构建。";
      if (f.kind === "file") return ["请通过 HTTP 访问整个站点：", steps, ""];
      if (f.kind === "damaged") {
        return ["请运行 `python -m tools.docs explorer` 重新导出模型，再运行 `make docs` 重新构建。", [], ""];
      }
      if (f.kind === "network") {
        return ["先确认提供本站的服务器还在运行，再刷新本页。如果还是读不到，请把两个版本一起构建、一起访问：", steps, ""];
      }
      return ["中文版没有自己的一份模型文件，它读的是英文版站点里的（上一级目录的 `generated/explorer/`），"
        + "所以单独预览或发布中文版时（比如用 `mkdocs serve -f mkdocs.zh.yml`，或者只把 `site/zh/` 放到服务器上），"
        + "本页读不到模型。请把两个版本一起构建、一起访问：", steps, missing];
    },
    gridLabel: "每一层、每个头的注意力图",
    mapsHelp: (L, H) => `每张小图是一个头（行：第 0 层到第 ${L - 1} 层；列：第 0 个到第 ${H - 1} 个头）。选一张即可放大查看。`,
    headAxis: (h) => `头 ${h}`,
    layerAxis: (l) => `第 ${l} 层`,
    thumb: (l, h) => `第 ${l} 层，第 ${h} 个头`,
    caption: (l, h) => `第 ${l} 层，第 ${h} 个头：每一行是一个查询字符，每一列是一个键；颜色越浓，权重越大（每行之和为 1）`,
    bigLabel: (l, h) => `第 ${l} 层第 ${h} 个头的注意力图；用方向键选择查询所在的行`,
    noMap: "没有注意力图：没有可读的字符",
    headViewCaption: "头视图：从查询（上方）连到它读取的各个键（下方）",
    headViewLabel: (l, h) => `第 ${l} 层第 ${h} 个头的头视图；用方向键选择查询字符`,
    readout: (ch, q, most) => `查询“${ch}”（位置 ${q}）最关注：${most.join("、")}`,
    readoutKey: (ch, j, w) => `位置 ${j} 的“${ch}”（${w}）`,
    next: "下一个字符",
    topLabel: "最可能的十个下一个字符",
    temperature: "温度 ",
    greedy: "0（贪心）",
    topK: "Top-k ",
    all: "全部",
    sample: "采样下一个字符",
    unknown: (name, V, list, more) => `已略去以下字符，它们不在${name}模型的词表（共 ${V} 个字符）里：`
      + `${list.join("、")}${more ? `，另有 ${more} 个` : ""}。字符级模型只为训练文本里出现过的每个字符`
      + "准备一行嵌入，其他字符没有嵌入，所以模型读提示词时会跳过它们。",
    unknownChar: (ch, code) => `“${ch}”（${code}）`,
    reads: "模型读入的字符（⏎ 是换行，␣ 是空格）：",
    promptHelp: "回车键换行：换行符和其他字符一样，也是一个字符。",
    cropped: (B, n, half) => `模型只读最后 ${B} 个字符（开头略去了 ${n} 个）：它只为 ${B} 个位置学过位置嵌入`
      + `（block_size）。generate() 和 stream() 的第一步也这样截取；之后不用 KV 缓存时，每一步都读最后 ${B} 个字符；`
      + `用 KV 缓存时（默认），每一步只加入一个新字符，缓存存满 ${B} 个字符后，再从最后 ${half} 个字符重新建立缓存。`
      + `本页每次都读最后 ${B} 个字符。`,
    typeOne: (name) => `请至少输入一个${name}模型认识的字符。`,
    status: (name, T, B, L, H, ms) => `${name}模型：用了 ${B} 个位置中的 ${T} 个，${L} 层 × ${H} 个头；`
      + `本页中一次前向传播耗时 ${ms} ms。`,
  } : {
    models: { en: "English", zh: "中文 (Chinese)", tang: "唐诗 (Tang poems)" },
    model: "Model",
    prompt: "Prompt",
    loading: (name) => `Loading the ${name} model...`,
    why: "What failed: ",
    todo: "What to do: ",
    failed: (f) => ({
      file: "This page was opened from the file system (its address starts with file://), and browsers "
        + `do not let such a page read other files with fetch(): the model file \`${f.file}\` `
        + `(\`${f.url}\`) cannot be read.`,
      http: `The browser asked for the model file \`${f.file}\` at \`${f.url}\`, and the server answered `
        + `${f.status === 404 ? "HTTP 404 (no such file)" : f.detail}.`,
      network: `The browser asked for the model file \`${f.file}\` at \`${f.url}\` and got an error: `
        + `\`${f.detail}\`.`,
      damaged: `The model file \`${f.file}\` (\`${f.url}\`) arrived, but not as it should be `
        + `(\`${f.detail}\`): it is damaged or incomplete.`,
    })[f.kind],
    help: (f, page) => {
      const steps = ["`make docs-serve` (on Windows `py tasks.py docs-serve`), or `make docs` and then "
        + "`python -m http.server --directory site`;", `open \`${page}\` in the browser.`];
      const missing = "If `docs/generated/explorer/` lacks the file, export the models first with "
        + "`python -m tools.docs explorer`, then build again.";
      if (f.kind === "file") return ["Serve the built site over HTTP:", steps, ""];
      if (f.kind === "damaged") {
        return ["Export the models again with `python -m tools.docs explorer`, then rebuild with `make docs`.", [], ""];
      }
      if (f.kind === "network") {
        return ["Check that the server of this site is still running, and reload the page. If that does not "
          + "help, serve the whole built site:", steps, ""];
      }
      return ["The page reads the models from `generated/explorer/` at the root of the built site; serve the "
        + "whole site:", steps, missing];
    },
    gridLabel: "attention map of every layer and head",
    mapsHelp: (L, H) => `Each small map is one head (rows: layers 0 to ${L - 1}, columns: heads 0 to ${H - 1}). `
      + "Choose one to see it large.",
    headAxis: (h) => `head ${h}`,
    layerAxis: (l) => `layer ${l}`,
    thumb: (l, h) => `layer ${l}, head ${h}`,
    caption: (l, h) => `Layer ${l}, head ${h}: each row is a query character, each column a key; `
      + "the stronger the colour, the more weight (each row sums to 1)",
    bigLabel: (l, h) => `attention map of layer ${l}, head ${h}; arrow keys choose the query row`,
    noMap: "no attention map: no characters",
    headViewCaption: "Head view: from the query (top) to the keys it reads (bottom)",
    headViewLabel: (l, h) => `head view of layer ${l}, head ${h}; arrow keys choose the query character`,
    readout: (ch, q, most) => `Query “${ch}” (position ${q}) looks most at: ${most.join(", ")}`,
    readoutKey: (ch, j, w) => `“${ch}” at ${j} (${w})`,
    next: "Next character",
    topLabel: "the ten most likely next characters",
    temperature: "Temperature ",
    greedy: "0 (greedy)",
    topK: "Top-k ",
    all: "all",
    sample: "Sample the next character",
    unknown: (name, V, list, more) => `Left out, not in the ${name} model's vocabulary of ${V} characters: `
      + `${list.join(", ")}${more ? ` and ${more} more` : ""}. A character-level model has `
      + "one embedding row per character of its training text and nothing for any other character, "
      + "so it reads the prompt without them.",
    unknownChar: (ch, code) => `“${ch}” (${code})`,
    reads: "The model reads (⏎ is a newline, ␣ a space):",
    promptHelp: "Enter starts a new line: the newline is a character like any other.",
    cropped: (B, n, half) => `The model reads only the last ${B} characters (${n} left out at the start): `
      + `it has learned position embeddings for ${B} places (block_size). generate() and stream() `
      + `start the same way; after that, without the KV cache they read the last ${B} characters at `
      + `every step, and with it (the default) they add one character at a time until the cache `
      + `holds ${B}, then start the cache again from the last ${half}. This page reads the last ${B} `
      + "every time.",
    typeOne: (name) => `Type at least one character the ${name} model knows.`,
    status: (name, T, B, L, H, ms) => `${name} model: ${T} of ${B} positions, `
      + `${L} layers × ${H} heads; forward pass ${ms} ms in this page.`,
  };
  const LANG_NAMES = TEXT.models; // the models this page can load, by their data-lang

  // ---------------------------------------------------------------- the model

  const models = {}; // lang -> Promise of the loaded model

  // Why a model could not be loaded: which file, from which address, and what went wrong.
  // kind: "file" (a page opened from the file system), "http" (the server answered with an
  // error status), "network" (the browser's fetch() failed), "damaged" (the file came, but
  // is not what the header says). The widget turns it into its two-part message.
  class LoadError extends Error {
    constructor(kind, url, detail, status) {
      super(`${url.href}: ${detail}`);
      this.kind = kind;
      this.url = url.href;
      this.file = url.pathname.split("/").pop();
      this.detail = detail;
      this.status = status || 0;
    }
  }

  function load(lang) {
    if (!models[lang]) {
      models[lang] = (async () => {
        let url = new URL(`${lang}.json`, BASE);
        try {
          const header = await (await fetchOk(url)).json();
          url = new URL(header.weights, BASE);
          const buffer = await (await fetchOk(url)).arrayBuffer();
          if (buffer.byteLength !== header.weights_bytes) {
            throw new Error(`${buffer.byteLength} bytes, expected ${header.weights_bytes}`);
          }
          const w = {};
          for (const t of header.tensors) {
            w[t.name] = decode(buffer, t.offset, t.shape.reduce((a, b) => a * b, 1), header.dtype || "float32");
          }
          const stoi = new Map(header.vocab.map((ch, i) => [ch, i]));
          return { lang, header, config: header.config, vocab: header.vocab, stoi, w, bytes: buffer.byteLength };
        } catch (err) {
          // A file that came but does not read (not JSON, too short, an unknown dtype): damaged.
          throw err instanceof LoadError ? err : new LoadError("damaged", url, String(err.message || err));
        }
      })();
      models[lang].catch(() => { delete models[lang]; }); // a later call may try again
    }
    return models[lang];
  }

  // n little-endian numbers from byte `offset` on, as a Float32Array. float16 (what the
  // export writes: half the bytes) becomes float32 exactly, as numpy's astype does in
  // load_export: every float16 number is a float32 number.
  function decode(buffer, offset, n, dtype) {
    const view = new DataView(buffer), out = new Float32Array(n);
    if (dtype === "float32") {
      for (let i = 0; i < n; i++) out[i] = view.getFloat32(offset + 4 * i, true);
    } else if (dtype === "float16") {
      for (let i = 0; i < n; i++) out[i] = halfToFloat(view.getUint16(offset + 2 * i, true));
    } else {
      throw new Error(`weights stored as ${dtype}: this page reads float16 or float32`);
    }
    return out;
  }

  // IEEE 754 half precision: 1 sign bit, 5 exponent bits (bias 15), 10 fraction bits.
  function halfToFloat(h) {
    const sign = h & 0x8000 ? -1 : 1, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
    if (exp === 0) return sign * frac * 2 ** -24; // zero and the subnormal numbers
    if (exp === 31) return frac ? NaN : sign * Infinity;
    return sign * (1 + frac / 1024) * 2 ** (exp - 15);
  }

  async function fetchOk(url) {
    // Browsers refuse fetch() on file:// (and log an error when asked): do not ask.
    if (url.protocol === "file:") throw new LoadError("file", url, "file://");
    let response;
    try {
      response = await fetch(url);
    } catch (err) { // no answer at all: the server stopped, a blocked request, ...
      throw new LoadError("network", url, String(err));
    }
    if (!response.ok) {
      throw new LoadError("http", url, `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ""}`,
        response.status);
    }
    return response;
  }

  // nn.Linear: y = x W^T + b. x (T, nIn), W (nOut, nIn) row-major, b (nOut) or undefined.
  function linear(x, T, nIn, W, b, nOut) {
    const y = new Float64Array(T * nOut);
    for (let t = 0; t < T; t++) {
      const xo = t * nIn;
      for (let o = 0; o < nOut; o++) {
        const wo = o * nIn;
        let s0 = 0, s1 = 0, s2 = 0, s3 = 0, i = 0;
        for (; i + 3 < nIn; i += 4) {
          s0 += x[xo + i] * W[wo + i];
          s1 += x[xo + i + 1] * W[wo + i + 1];
          s2 += x[xo + i + 2] * W[wo + i + 2];
          s3 += x[xo + i + 3] * W[wo + i + 3];
        }
        for (; i < nIn; i++) s0 += x[xo + i] * W[wo + i];
        y[t * nOut + o] = s0 + s1 + s2 + s3 + (b ? b[o] : 0);
      }
    }
    return y;
  }

  // nn.LayerNorm(C): per position, subtract the mean, divide by sqrt(var + 1e-5), scale, shift.
  function layerNorm(x, T, C, weight, bias) {
    const y = new Float64Array(T * C);
    for (let t = 0; t < T; t++) {
      let mean = 0;
      for (let c = 0; c < C; c++) mean += x[t * C + c];
      mean /= C;
      let v = 0;
      for (let c = 0; c < C; c++) v += (x[t * C + c] - mean) ** 2;
      const inv = 1 / Math.sqrt(v / C + 1e-5); // biased variance, as PyTorch
      for (let c = 0; c < C; c++) {
        y[t * C + c] = (x[t * C + c] - mean) * inv * weight[c] + (bias ? bias[c] : 0);
      }
    }
    return y;
  }

  // GELU as GPT-2 computes it (nn.GELU(approximate="tanh")):
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))); nn.ReLU for "relu".
  function activate(x, kind) {
    const k = Math.sqrt(2 / Math.PI);
    for (let i = 0; i < x.length; i++) {
      x[i] = kind === "relu" ? Math.max(0, x[i])
        : 0.5 * x[i] * (1 + Math.tanh(k * (x[i] + 0.044715 * x[i] ** 3)));
    }
    return x;
  }

  function addInPlace(x, y) {
    for (let i = 0; i < x.length; i++) x[i] += y[i];
  }

  // --8<-- [start:attention]
  // CausalSelfAttention.forward, on one sequence. Returns c_proj(y); pushes the
  // (n_head, T, T) weights to `maps`.
  function attention(h, T, C, nh, w, p, maps) {
    const hs = C / nh;
    const qkv = linear(h, T, C, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"], 3 * C); // q | k | v
    const y = new Float64Array(T * C); // heads side by side: (T, C)
    const weights = [];
    const scores = new Float64Array(T);
    for (let head = 0; head < nh; head++) {
      const qo = head * hs, ko = C + head * hs, vo = 2 * C + head * hs;
      const wts = new Float64Array(T * T); // zero above the diagonal: a token may not look ahead
      for (let i = 0; i < T; i++) {
        let max = -Infinity;
        for (let j = 0; j <= i; j++) { // masked: keys 0 .. i only
          let s = 0;
          for (let d = 0; d < hs; d++) s += qkv[i * 3 * C + qo + d] * qkv[j * 3 * C + ko + d];
          scores[j] = s / Math.sqrt(hs); // scaled = scores / sqrt(hs)
          if (scores[j] > max) max = scores[j];
        }
        let sum = 0;
        for (let j = 0; j <= i; j++) { scores[j] = Math.exp(scores[j] - max); sum += scores[j]; }
        for (let j = 0; j <= i; j++) {
          const a = scores[j] / sum; // weights = softmax(masked)
          wts[i * T + j] = a;
          for (let d = 0; d < hs; d++) y[i * C + qo + d] += a * qkv[j * 3 * C + vo + d]; // weights @ v
        }
      }
      weights.push(wts);
    }
    maps.push(weights);
    return linear(y, T, C, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"], C);
  }
  // --8<-- [end:attention]

  // MLP.forward: c_proj(act(c_fc(x))), C -> 4C -> C.
  function mlp(h, T, C, w, p, kind) {
    const a = activate(linear(h, T, C, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"], 4 * C), kind);
    return linear(a, T, 4 * C, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"], C);
  }

  // --8<-- [start:forward]
  // GPT.forward for one sequence of ids: logits (T, vocab_size) and attention maps
  // [layer][head] -> (T, T), row = query, column = key.
  function forward(model, idx) {
    const { n_layer, n_head, n_embd: C, vocab_size: V, block_size, activation } = model.config;
    const w = model.w, T = idx.length;
    if (T < 1 || T > block_size) throw new Error(`need 1 to ${block_size} tokens, got ${T}`);
    // embed: token plus position embeddings, the residual stream's start (T, C)
    const x = new Float64Array(T * C);
    const wte = w["transformer.wte.weight"], wpe = w["transformer.wpe.weight"];
    for (let t = 0; t < T; t++) {
      for (let c = 0; c < C; c++) x[t * C + c] = wte[idx[t] * C + c] + wpe[t * C + c];
    }
    const maps = [];
    for (let l = 0; l < n_layer; l++) { // Block.forward, pre-LayerNorm
      const p = `transformer.h.${l}.`;
      addInPlace(x, attention(layerNorm(x, T, C, w[p + "ln_1.weight"], w[p + "ln_1.bias"]), T, C, n_head, w, p, maps));
      addInPlace(x, mlp(layerNorm(x, T, C, w[p + "ln_2.weight"], w[p + "ln_2.bias"]), T, C, w, p, activation));
    }
    // readout: the final LayerNorm and lm_head (tied: the token embedding wte itself)
    const hf = layerNorm(x, T, C, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"]);
    const logits = linear(hf, T, C, w["lm_head.weight"] || wte, undefined, V);
    return { logits, maps, T, V };
  }
  // --8<-- [end:forward]

  // sample_next's distribution: shift, scale by 1/temperature, keep the top k, softmax.
  // temperature 0 is greedy: all probability on the largest logit.
  function nextDistribution(logits, temperature, topK) {
    const V = logits.length;
    let max = -Infinity, arg = 0;
    for (let i = 0; i < V; i++) if (logits[i] > max) { max = logits[i]; arg = i; }
    const probs = new Float64Array(V);
    if (temperature === 0) { probs[arg] = 1; return probs; }
    const scale = Math.min(1 / temperature, 3.4028234663852886e38);
    const z = Array.from(logits, (v) => (v - max) * scale);
    if (topK && topK < V) {
      const kth = [...z].sort((a, b) => b - a)[topK - 1];
      for (let i = 0; i < V; i++) if (z[i] < kth) z[i] = -Infinity; // ties with the k-th stay
    }
    let sum = 0;
    for (let i = 0; i < V; i++) { probs[i] = Math.exp(z[i]); sum += probs[i]; }
    for (let i = 0; i < V; i++) probs[i] /= sum;
    return probs;
  }

  function sample(probs) {
    let r = Math.random(), i = 0;
    for (; i < probs.length - 1; i++) { r -= probs[i]; if (r < 0) break; }
    while (probs[i] === 0 && i > 0) i--; // rounding at the very end of the range
    return i;
  }

  // ---------------------------------------------------------------- the widget

  const shown = (ch) => SHOWN[ch] || ch;
  const codePoint = (ch) => "U+" + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
  const pct = (p) => (p >= 0.995 ? (100 * p).toFixed(0) : p >= 0.001 ? (100 * p).toFixed(1)
    : p >= 0.00005 ? (100 * p).toFixed(2) : "<0.01") + "%";
  let counter = 0;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c);
    return node;
  }

  // "text with `code` in it" -> text and <code> nodes
  function withCode(text) {
    return text.split("`").map((part, i) => (i % 2 ? el("code", { text: part }) : part));
  }

  function colors(root) {
    const style = getComputedStyle(root);
    const get = (name, fallback) => (style.getPropertyValue(name) || fallback).trim();
    return {
      cold: parseColor(get("--gx-cold", "#ffffff")), hot: parseColor(get("--gx-hot", "#1a237e")),
      masked: get("--gx-masked", "#eeeeee"), muted: get("--gx-muted", "#9e9ea8"), fg: get("--gx-fg", "#222222"), mark: get("--gx-mark", "#e53935"),
      font: style.fontFamily,
    };
  }

  function parseColor(hex) {
    const m = /^#?([0-9a-f]{6})$/i.exec(hex.trim());
    const n = m ? parseInt(m[1], 16) : 0;
    return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
  }

  function heat(c, a) { // weight 0 -> the background, 1 -> the hot colour
    const mix = (i) => Math.round(c.cold[i] + (c.hot[i] - c.cold[i]) * a);
    return `rgb(${mix(0)},${mix(1)},${mix(2)})`;
  }

  function sizeCanvas(canvas, width, height) {
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    return g;
  }

  class Explorer {
    constructor(root) {
      this.root = root;
      this.id = ++counter;
      this.compact = root.dataset.compact === "true";
      this.lang = root.dataset.lang in LANG_NAMES ? root.dataset.lang : "en";
      this.layer = 0; this.head = 0; this.query = -1; // -1: the last position
      this.result = null;
      this.build();
      this.setLang(this.lang, true);
      new MutationObserver(() => this.draw()).observe(document.body, {
        attributes: true, attributeFilter: ["data-md-color-scheme"] });
      let pending = 0;
      new ResizeObserver(() => {
        cancelAnimationFrame(pending);
        pending = requestAnimationFrame(() => this.draw());
      }).observe(root);
    }

    build() {
      const id = `gx${this.id}`;
      this.root.textContent = "";
      this.root.dataset.state = "loading";
      this.radios = Object.keys(LANG_NAMES).map((lang) => el("input", {
        type: "radio", name: `${id}-model`, value: lang, onchange: () => this.setLang(lang) }));
      // A textarea: the prompt may hold newlines (Enter), characters like any other.
      this.prompt = el("textarea", { id: `${id}-prompt`, class: "gx-prompt", rows: "2", spellcheck: "false",
        autocomplete: "off", autocapitalize: "off", "aria-describedby": `${id}-prompt-help ${id}-notes`,
        oninput: () => this.run() });
      this.reads = el("code", { class: "gx-reads-text" });
      this.status = el("div", { class: "gx-status", role: "status", "aria-live": "polite" });
      this.notes = el("div", { class: "gx-notes", id: `${id}-notes`, "aria-live": "polite" });
      this.grid = el("div", { class: "gx-grid", role: "group", "aria-label": TEXT.gridLabel });
      this.bigCaption = el("figcaption", { class: "gx-caption" });
      this.big = el("canvas", { class: "gx-big", tabindex: "0", role: "img" });
      this.readout = el("p", { class: "gx-readout", "aria-live": "polite" });
      this.headView = el("canvas", { class: "gx-headview", tabindex: "0", role: "img" });
      this.headText = el("p", { class: "gx-readout", "aria-live": "polite" });
      this.temperature = el("input", { type: "range", id: `${id}-temp`, min: "0", max: "2", step: "0.05",
        value: "1", oninput: () => this.predict() });
      this.tempOut = el("output", { for: `${id}-temp`, class: "gx-temp-value" });
      this.topK = el("input", { type: "number", id: `${id}-topk`, min: "1", step: "1", placeholder: TEXT.all,
        inputmode: "numeric", class: "gx-topk", oninput: () => this.predict() });
      this.sampleButton = el("button", { type: "button", class: "md-button md-button--primary gx-sample",
        onclick: () => this.sampleNext() }, TEXT.sample);
      this.top = el("ol", { class: "gx-top", "aria-label": TEXT.topLabel });
      this.mapsHelp = el("p", { class: "gx-help" });

      const models = el("fieldset", { class: "gx-models" }, el("legend", { text: TEXT.model }),
        ...this.radios.map((r) => el("label", {}, r, ` ${LANG_NAMES[r.value]}`)));
      const prompt = el("label", { class: "gx-prompt-label", for: `${id}-prompt` }, TEXT.prompt);
      const promptHelp = el("p", { class: "gx-help", id: `${id}-prompt-help`, text: TEXT.promptHelp });
      const reads = el("p", { class: "gx-reads" }, el("span", { text: TEXT.reads }), " ", this.reads);
      const bigBox = this.bigBox = el("figure", { class: "gx-bigbox" }, this.bigCaption,
        el("div", { class: "gx-scroll" }, this.big), this.readout);
      const viewBox = el("figure", { class: "gx-viewbox" },
        el("figcaption", { class: "gx-caption", text: TEXT.headViewCaption }),
        el("div", { class: "gx-scroll" }, this.headView), this.headText);
      const next = el("section", { class: "gx-next", "aria-label": TEXT.next },
        el("h4", { text: TEXT.next }),
        el("div", { class: "gx-sampling" },
          el("label", { for: `${id}-temp` }, TEXT.temperature), this.temperature, this.tempOut,
          el("label", { for: `${id}-topk` }, TEXT.topK), this.topK),
        this.top, this.sampleButton);
      this.root.append(
        el("div", { class: "gx-controls" }, models,
          el("div", { class: "gx-prompt-row" }, prompt, this.prompt, promptHelp)),
        reads, this.status, this.notes,
        el("div", { class: "gx-maps" },
          el("div", { class: "gx-gridbox" }, this.mapsHelp, this.grid), bigBox),
        ...(this.compact ? [] : [viewBox]), next);

      // The large map and the head view: hover, tap or arrow keys choose the query.
      const pick = (canvas, toQuery) => {
        const handler = (e) => {
          const r = canvas.getBoundingClientRect();
          const q = toQuery(e.clientX - r.left, e.clientY - r.top);
          if (q !== null && q !== this.query) { this.query = q; this.drawQuery(); }
        };
        canvas.addEventListener("pointermove", handler);
        canvas.addEventListener("pointerdown", handler);
      };
      pick(this.big, (x, y) => this.bigCell(x, y));
      pick(this.headView, (x) => this.viewIndex(x));
      for (const canvas of [this.big, this.headView]) {
        canvas.addEventListener("keydown", (e) => {
          if (!this.result) return;
          const T = this.result.T, q = this.queryIndex();
          const step = { ArrowUp: -1, ArrowLeft: -1, ArrowDown: 1, ArrowRight: 1 }[e.key];
          let next = null;
          if (step) next = Math.min(T - 1, Math.max(0, q + step));
          if (e.key === "Home") next = 0;
          if (e.key === "End") next = T - 1;
          if (next !== null) { e.preventDefault(); this.query = next; this.drawQuery(); }
        });
      }
    }

    async setLang(lang, first) {
      const old = this.model;
      this.lang = lang;
      this.radios.forEach((r) => { r.checked = r.value === lang; });
      this.status.textContent = TEXT.loading(LANG_NAMES[lang]);
      this.root.dataset.state = "loading";
      let model;
      try {
        model = await load(lang);
      } catch (err) {
        if (this.lang !== lang) return;
        this.root.dataset.state = "error";
        this.showFailure(err instanceof LoadError ? err
          : new LoadError("damaged", new URL(`${lang}.json`, BASE), String(err.message || err)));
        return;
      }
      if (this.lang !== lang) return; // another choice came in meanwhile
      this.model = model;
      const c = model.config;
      this.topK.max = String(c.vocab_size);
      // A new model starts from its own example unless the reader typed something.
      if (first || !this.prompt.value || (old && this.prompt.value === old.header.example)) {
        this.prompt.value = model.header.example;
      }
      this.layer = Math.min(this.layer, c.n_layer - 1);
      this.head = Math.min(this.head, c.n_head - 1);
      this.buildGrid();
      this.run();
      this.root.dataset.state = "ready";
      if (api.firstRender === null) api.firstRender = performance.now();
    }

    // The two parts of the message: what failed (the file, its address, the status or the
    // browser's error) and what to do, with the address of this page on a local server.
    showFailure(f) {
      const name = window.location.pathname.split("/").pop() || "index.html";
      const page = `http://127.0.0.1:8000/${UI_ZH ? "zh/" : ""}${name}`;
      this.status.textContent = "";
      const [lead, steps, last] = TEXT.help(f, page);
      this.status.append(
        el("p", { class: "gx-why" }, el("strong", { text: TEXT.why }), ...withCode(TEXT.failed(f))),
        el("div", { class: "gx-todo" }, el("p", {}, el("strong", { text: TEXT.todo }), ...withCode(lead)),
          ...(steps.length ? [el("ol", {}, ...steps.map((step) => el("li", {}, ...withCode(step))))] : []),
          ...(last ? [el("p", {}, ...withCode(last))] : [])));
    }

    buildGrid() {
      const { n_layer, n_head } = this.model.config;
      this.grid.textContent = "";
      this.grid.style.gridTemplateColumns = `auto repeat(${n_head}, minmax(0, 1fr))`;
      this.grid.append(el("span", {}));
      this.mapsHelp.textContent = TEXT.mapsHelp(n_layer, n_head);
      // Layers and heads count from 0, as everywhere in the course (transformer.h[0], ...).
      for (let h = 0; h < n_head; h++) this.grid.append(el("span", { class: "gx-axis", text: TEXT.headAxis(h) }));
      this.thumbs = [];
      for (let l = 0; l < n_layer; l++) {
        this.grid.append(el("span", { class: "gx-axis", text: TEXT.layerAxis(l) }));
        for (let h = 0; h < n_head; h++) {
          const canvas = el("canvas", { "aria-hidden": "true" });
          const button = el("button", { type: "button", class: "gx-thumb", "aria-label": TEXT.thumb(l, h),
            onclick: () => { this.layer = l; this.head = h; this.draw(); } }, canvas);
          this.thumbs.push({ l, h, button, canvas });
          this.grid.append(button);
        }
      }
    }

    // The prompt as the model sees it: known characters only, the last block_size of them.
    encode() {
      const { stoi, config } = this.model;
      const chars = Array.from(this.prompt.value);
      const unknown = [...new Set(chars.filter((ch) => !stoi.has(ch)))];
      let known = chars.filter((ch) => stoi.has(ch));
      const cropped = Math.max(0, known.length - config.block_size);
      known = known.slice(cropped);
      return { chars: known, ids: known.map((ch) => stoi.get(ch)), unknown, cropped };
    }

    run() {
      if (!this.model) return;
      const { chars, ids, unknown, cropped } = this.encode();
      const m = this.model, name = LANG_NAMES[m.lang];
      this.notes.textContent = "";
      this.reads.textContent = chars.map(shown).join("");
      if (unknown.length) {
        const list = unknown.slice(0, 12).map((ch) => TEXT.unknownChar(shown(ch), codePoint(ch)));
        this.notes.append(el("p", { class: "gx-unknown" },
          TEXT.unknown(name, m.config.vocab_size, list, Math.max(0, unknown.length - 12))));
      }
      if (cropped) {
        const B = m.config.block_size;
        this.notes.append(el("p", { class: "gx-cropped" }, TEXT.cropped(B, cropped, Math.max(1, Math.floor(B / 2)))));
      }
      if (!ids.length) {
        this.result = null;
        this.chars = [];
        this.status.textContent = TEXT.typeOne(name);
        this.draw();
        this.predict();
        return;
      }
      const t0 = performance.now();
      this.result = forward(m, ids);
      const ms = performance.now() - t0;
      this.chars = chars;
      if (this.query >= chars.length) this.query = -1;
      this.status.textContent = TEXT.status(name, ids.length, m.config.block_size, m.config.n_layer,
        m.config.n_head, ms.toFixed(1));
      this.draw();
      this.predict();
    }

    queryIndex() {
      return this.query < 0 ? this.result.T - 1 : this.query;
    }

    draw() {
      if (!this.model) return;
      const c = colors(this.root);
      const res = this.result;
      for (const t of this.thumbs || []) {
        const on = t.l === this.layer && t.h === this.head;
        t.button.setAttribute("aria-pressed", String(on));
        const size = Math.max(24, Math.floor(t.button.clientWidth) - 6);
        const g = sizeCanvas(t.canvas, size, size);
        if (res) this.paintMap(g, res.maps[t.l][t.h], res.T, 0, 0, size / res.T, c);
      }
      this.bigCaption.textContent = TEXT.caption(this.layer, this.head);
      this.drawQuery(c);
    }

    paintMap(g, wts, T, x0, y0, cell, c) {
      for (let i = 0; i < T; i++) {
        for (let j = 0; j < T; j++) {
          g.fillStyle = j > i ? c.masked : heat(c, wts[i * T + j]);
          g.fillRect(x0 + j * cell, y0 + i * cell, Math.ceil(cell), Math.ceil(cell));
        }
      }
    }

    // Where the large map goes: beside the small maps while it fits there with cells of
    // 12 px or more, else on a row of its own below them (the flex row wraps).
    placeBig() {
      const T = this.result ? this.result.T : 0;
      const row = this.bigBox.parentElement.clientWidth;
      this.bigBox.style.minWidth = T ? `${Math.min(row, Math.ceil(12 * (T + 1.1) + 12))}px` : "";
    }

    // Geometry of the large map: tick labels left (queries) and on top (keys). It fits its
    // box whatever the prompt's length: the cells are as large as fit (up to 28 px), and
    // where they get smaller than the labels' smallest font (9 px, on a phone), only every
    // step-th character is labelled.
    bigGeometry() {
      const T = this.result.T;
      const avail = Math.max(160, this.big.parentElement.clientWidth - 4); // its own column
      let cell = Math.max(1, Math.min(this.compact ? 20 : 28, Math.floor((avail - 8) / (T + 1.1))));
      const font = Math.max(9, Math.min(15, Math.round(cell * 0.8)));
      const label = Math.max(Math.round(cell * 1.1), font + 2) + 6;
      cell = Math.max(1, Math.min(cell, Math.floor((avail - 2 - label) / T)));
      return { T, cell, label, font, step: Math.ceil(font / cell) };
    }

    bigCell(x, y) {
      if (!this.result) return null;
      const { T, cell, label } = this.bigGeometry();
      const i = Math.floor((y - label) / cell);
      return x >= label && i >= 0 && i < T ? i : null;
    }

    viewGeometry() {
      const T = this.result.T;
      const avail = Math.max(160, this.headView.parentElement.clientWidth - 4);
      const cell = Math.max(16, Math.min(28, Math.floor(avail / T)));
      return { T, cell, height: 150, font: Math.min(16, Math.round(cell * 0.8)) };
    }

    viewIndex(x) {
      if (!this.result) return null;
      const { T, cell } = this.viewGeometry();
      const i = Math.floor(x / cell);
      return i >= 0 && i < T ? i : null;
    }

    // Everything that depends on the chosen query: the large map, the head view, the readouts.
    drawQuery(c) {
      c = c || colors(this.root);
      const res = this.result;
      if (!res) {
        this.placeBig();
        sizeCanvas(this.big, 1, 1); sizeCanvas(this.headView, 1, 1);
        this.readout.textContent = ""; this.headText.textContent = "";
        this.big.setAttribute("aria-label", TEXT.noMap);
        return;
      }
      const wts = res.maps[this.layer][this.head], q = this.queryIndex(), chars = this.chars;
      this.placeBig();
      const { T, cell, label, font, step } = this.bigGeometry();
      const g = sizeCanvas(this.big, label + T * cell + 2, label + T * cell + 2);
      this.paintMap(g, wts, T, label, label, cell, c);
      g.fillStyle = c.fg;
      g.font = `${font}px ${c.font}`;
      g.textAlign = "center";
      g.textBaseline = "middle";
      for (let i = 0; i < T; i += step) {
        g.fillText(shown(chars[i]), label / 2, label + (i + 0.5) * cell); // queries, down the left
        g.fillText(shown(chars[i]), label + (i + 0.5) * cell, label / 2); // keys, along the top
      }
      g.strokeStyle = c.mark;
      g.lineWidth = 2;
      g.strokeRect(label + 1, label + q * cell + 1, (q + 1) * cell - 2, cell - 2); // the query's row
      this.big.setAttribute("aria-label", TEXT.bigLabel(this.layer, this.head));

      const ranked = Array.from({ length: q + 1 }, (_, j) => j).sort((a, b) => wts[q * T + b] - wts[q * T + a]);
      const text = TEXT.readout(shown(chars[q]), q,
        ranked.slice(0, 3).filter((j, r) => r === 0 || wts[q * T + j] >= 0.005)  // no 0.00s
          .map((j) => TEXT.readoutKey(shown(chars[j]), j, wts[q * T + j].toFixed(2))));
      this.readout.textContent = text;

      if (this.compact) return;
      const v = this.viewGeometry();
      const gv = sizeCanvas(this.headView, v.T * v.cell + 2, v.height);
      const top = v.font + 4, bottom = v.height - v.font - 6;
      for (let j = 0; j <= q; j++) { // shade the keys, draw a line from the query to each
        const a = wts[q * T + j];
        gv.fillStyle = heat(c, a);
        gv.fillRect(j * v.cell + 1, bottom - 2, v.cell - 2, v.font + 8);
        gv.strokeStyle = `rgba(${c.hot.join(",")},${Math.min(1, a * 1.2).toFixed(3)})`;
        gv.lineWidth = 1 + 5 * a;
        gv.beginPath();
        gv.moveTo((q + 0.5) * v.cell, top + 6);
        gv.lineTo((j + 0.5) * v.cell, bottom - 4);
        gv.stroke();
      }
      gv.font = `${v.font}px ${c.font}`;
      gv.textAlign = "center";
      gv.textBaseline = "middle";
      for (let i = 0; i < T; i++) {
        gv.fillStyle = i === q ? c.mark : i > q ? c.muted : c.fg;
        gv.fillText(shown(chars[i]), (i + 0.5) * v.cell, top - v.font / 2);
        gv.fillStyle = i > q ? c.muted : a11yText(c, wts[q * T + i]);
        gv.fillText(shown(chars[i]), (i + 0.5) * v.cell, bottom + v.font / 2 + 2);
      }
      this.headView.setAttribute("aria-label", TEXT.headViewLabel(this.layer, this.head));
      this.headText.textContent = text;
    }

    predict() {
      const temperature = Number(this.temperature.value);
      this.tempOut.textContent = temperature === 0 ? TEXT.greedy : temperature.toFixed(2);
      const k = Math.floor(Number(this.topK.value));
      const V = this.model ? this.model.config.vocab_size : 0;
      const topK = this.topK.value === "" || !(k >= 1) ? null : Math.min(k, V);
      this.top.textContent = "";
      this.sampleButton.disabled = !this.result;
      if (!this.result) return;
      const { logits, T } = this.result;
      this.probs = nextDistribution(logits.subarray((T - 1) * V, T * V), temperature, topK);
      const order = Array.from({ length: V }, (_, i) => i).sort((a, b) => this.probs[b] - this.probs[a]);
      for (const i of order.slice(0, 10).filter((i) => this.probs[i] > 0)) {  // none of p = 0
        const p = this.probs[i], ch = this.model.vocab[i];
        const bar = el("span", { class: "gx-bar" });
        bar.style.width = `${(100 * p).toFixed(1)}%`;
        this.top.append(el("li", { title: codePoint(ch), "data-p": String(p) },
          el("span", { class: "gx-char", text: shown(ch) }),
          el("span", { class: "gx-barbox" }, bar),
          el("span", { class: "gx-prob", text: pct(p) })));
      }
    }

    // One step of generate(): the sampled character, whatever it is (a newline too), goes
    // at the end of the prompt, and the model reads the longer text.
    sampleNext() {
      if (!this.result || !this.probs) return;
      const i = sample(this.probs);
      this.prompt.value += this.model.vocab[i];
      this.prompt.scrollTop = this.prompt.scrollHeight;
      this.query = -1;
      this.run();
    }
  }

  // Text on a shaded key stays readable: the foreground on light cells, the background on dark.
  function a11yText(c, a) {
    const [r, g, b] = c.hot.map((h, i) => c.cold[i] + (h - c.cold[i]) * a);
    const lum = (0.299 * r + 0.587 * g + 0.114 * b) / 255;
    const [br, bg, bb] = c.cold;
    const coldLum = (0.299 * br + 0.587 * bg + 0.114 * bb) / 255;
    return Math.abs(lum - coldLum) > 0.45 ? `rgb(${c.cold.join(",")})` : c.fg;
  }

  // ---------------------------------------------------------------- for tests and the console

  const api = {
    load,
    firstRender: null, // ms after navigation start when the first explorer was drawn
    instances: [],
    // forward on ids: {T, V, logits: (T, V), maps: [layer][head] (T, T)}, each array as the
    // base64 of its float64 bytes: lossless, and far quicker to hand to a test than numbers
    async forward(lang, ids) {
      const m = await load(lang);
      const r = forward(m, ids);
      const b64 = (a) => {
        const u = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
        let s = "";
        for (let i = 0; i < u.length; i += 0x8000) s += String.fromCharCode.apply(null, u.subarray(i, i + 0x8000));
        return btoa(s);
      };
      return { T: r.T, V: r.V, logits: b64(r.logits), maps: r.maps.map((l) => l.map(b64)) };
    },
    // one full forward pass, timed: the median of ``repeat`` runs, in ms
    async time(lang, ids, repeat) {
      const m = await load(lang);
      const times = [];
      for (let i = 0; i < (repeat || 9); i++) {
        const t0 = performance.now();
        forward(m, ids);
        times.push(performance.now() - t0);
      }
      times.sort((a, b) => a - b);
      return times[Math.floor(times.length / 2)];
    },
    nextDistribution,
  };
  window.gptExplorer = api;

  function start() {
    for (const root of document.querySelectorAll(".gpt-explorer:not([data-state])")) {
      api.instances.push(new Explorer(root));
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
