// The chat page's Markdown renderer and code highlighter (embedded into chat_page.html at
// build time, as src/server/CMakeLists.txt says).
"use strict";

// ---------------------------------------------------------------------------------------------
// Markdown: a small block and inline renderer. Every piece of text goes through esc(); the only
// markup in the output is the renderer's own, and links keep http(s) and mailto targets only.
// ---------------------------------------------------------------------------------------------
const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const esc = (s) => s.replace(/[&<>"']/g, (c) => ESCAPES[c]);

// Syntax highlighting: one regular expression per language whose named groups are the token
// classes (c comment, s string, a key, p preprocessor / decorator / variable, n number, w word);
// words are then looked up as keywords (k), types (t) and literals (l), or called functions (f).
const HIGHLIGHT = (() => {
  const set = (s) => new Set(s.split(" "));
  const S = {
    dq: /"(?:[^"\\\n]|\\.)*"?/, sq: /'(?:[^'\\\n]|\\.)*'?/, bt: /`(?:[^`\\]|\\[\s\S])*`?/,
    slash: /\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)/, hash: /#[^\n]*/,
    num: /\b(?:0[xX][\da-fA-F_]+|0[bB][01_]+|\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)[a-zA-Z]*\b/,
    word: /[A-Za-z_$][\w$]*/,
  };
  function lang(parts, kw, types = "", lits = "true false null") {
    const groups = Object.entries(parts).map(([g, rs]) => "(?<" + g + ">" +
      [].concat(rs).map((r) => r.source).join("|") + ")");
    groups.push("(?<n>" + S.num.source + ")", "(?<w>" + S.word.source + ")");
    return { re: new RegExp(groups.join("|"), "g"), kw: set(kw), types: set(types), lits: set(lits) };
  }
  const cKw = "auto break case const continue default do else enum extern for goto if inline register " +
    "restrict return sizeof static struct switch typedef union volatile while";
  const cTypes = "void char short int long float double signed unsigned bool size_t ssize_t int8_t " +
    "int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t FILE";
  const cppKw = cKw + " alignas alignof and asm catch class co_await co_return co_yield concept " +
    "consteval constexpr constinit const_cast decltype delete dynamic_cast explicit export friend " +
    "mutable namespace new noexcept not operator or private protected public reinterpret_cast " +
    "requires static_assert static_cast template this thread_local throw try typeid typename using " +
    "virtual override final";
  const cppTypes = cTypes + " std string string_view vector map unordered_map set array span " +
    "unique_ptr shared_ptr optional variant pair tuple wchar_t char8_t char16_t char32_t";
  const pre = /(?<=^|\n)[ \t]*#[ \t]*\w+/;
  const c = lang({ c: S.slash, s: [S.dq, S.sq], p: pre }, cKw, cTypes, "true false NULL nullptr");
  const cpp = lang({ c: S.slash, s: [S.dq, S.sq], p: pre }, cppKw, cppTypes, "true false NULL nullptr");
  const js = lang({ c: S.slash, s: [S.dq, S.sq, S.bt] },
    "async await break case catch class const continue debugger default delete do else export extends " +
    "finally for from function get if import in instanceof let new of return set static super switch " +
    "this throw try typeof var void while with yield as interface type enum implements declare " +
    "readonly keyof namespace abstract private protected public",
    "Array Object String Number Boolean Promise Map Set Symbol Error JSON Math console window document " +
    "string number boolean any unknown never",
    "true false null undefined NaN Infinity");
  const python = lang({ c: S.hash, s: [/"""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)/, S.dq, S.sq],
                        p: /(?<=^|\n)[ \t]*\x40[\w.]+/ },
    "and as assert async await break class continue def del elif else except finally for from global " +
    "if import in is lambda match case nonlocal not or pass raise return try while with yield",
    "int float str bytes bool list dict set tuple object type len range print isinstance super self cls",
    "True False None");
  const rust = lang({ c: S.slash, s: [S.dq, /'(?:[^'\\\n]|\\[^'\n]+)'/], p: /\b\w+!/ },
    "as async await break const continue crate dyn else enum extern fn for if impl in let loop match " +
    "mod move mut pub ref return static struct super trait type unsafe use where while",
    "Self self i8 i16 i32 i64 i128 isize u8 u16 u32 u64 u128 usize f32 f64 bool char str String Vec " +
    "Option Result Box Rc Arc HashMap",
    "true false None Some Ok Err");
  const go = lang({ c: S.slash, s: [S.dq, S.sq, /`[^`]*`?/] },
    "break case chan const continue default defer else fallthrough for func go goto if import " +
    "interface map package range return select struct switch type var",
    "bool byte complex64 complex128 error float32 float64 int int8 int16 int32 int64 rune string " +
    "uint uint8 uint16 uint32 uint64 uintptr any",
    "true false nil iota");
  const java = lang({ c: S.slash, s: [S.dq, S.sq], p: /\x40\w+/ },
    "abstract assert break case catch class const continue default do else enum extends final finally " +
    "for goto if implements import instanceof interface native new package private protected public " +
    "return static strictfp super switch synchronized this throw throws transient try var void " +
    "volatile while record",
    "boolean byte char double float int long short String Object Integer List Map",
    "true false null");
  const bash = lang({ c: /(?<=^|\s)#[^\n]*/, s: [S.dq, /'[^']*'?/], p: /\$\{[^}\n]*\}?|\$\w+|\$[?#$!*\x40]/ },
    "if then else elif fi for in do done while until case esac function return local export " +
    "readonly declare unset shift break continue exit",
    "echo cd ls cat grep sed awk printf read source set test cmake make git python3 pip curl sudo",
    "true false");
  const json = lang({ a: /"(?:[^"\\\n]|\\.)*"(?=\s*:)/, s: S.dq }, "", "", "true false null");
  const table = {};
  const alias = (l, names) => { for (const n of names.split(" ")) table[n] = l; };
  alias(c, "c h");
  alias(cpp, "cpp c++ cc cxx hpp hh hxx cuda cu");
  alias(js, "js javascript jsx mjs cjs ts typescript tsx");
  alias(python, "py python python3");
  alias(rust, "rs rust");
  alias(go, "go golang");
  alias(java, "java");
  alias(bash, "sh bash shell zsh console");
  alias(json, "json jsonc");
  return table;
})();

function highlight(l, code) {
  let out = "", last = 0;
  for (const m of code.matchAll(l.re)) {
    if (!m[0]) continue;
    out += esc(code.slice(last, m.index));
    last = m.index + m[0].length;
    const g = m.groups;
    let cls = g.c !== undefined ? "c" : g.s !== undefined ? "s" : g.a !== undefined ? "a" :
      g.p !== undefined ? "p" : g.n !== undefined ? "n" : "";
    if (g.w !== undefined) {
      const w = g.w;
      cls = l.kw.has(w) ? "k" : l.types.has(w) ? "t" : l.lits.has(w) ? "l" :
        /^\s*\(/.test(code.slice(last, last + 8)) ? "f" : "";
    }
    out += cls ? '<span class="tk-' + cls + '">' + esc(m[0]) + "</span>" : esc(m[0]);
  }
  return out + esc(code.slice(last));
}

// Inline markup: the leftmost construct wins. Emphasis looks at most 250 characters ahead and
// code spans 500; a code span opens only at the start of a whole run of backticks and closes at
// a run of the same length, so a long paragraph with unmatched markers or long runs of them
// (models repeat tokens) costs little.
const INLINE = new RegExp([
  /\\([\\`*_{}\[\]()#+\-.!|~<>])/,                                                     // 1 escape
  /(?<!`)(`+)(?!`)([\s\S]{1,500}?)(?<!`)\2(?!`)/,                                  // 2,3 code
  /!?\[((?:[^\[\]\\\n]|\\.|\[[^\[\]\n]*\]){1,500})\]\(<?([^\s<>()]*(?:\([^\s<>()]*\)[^\s<>()]*)*)>?(?:[ \t]+"[^"\n]*")?[ \t]*\)/, // 4,5 link
  /<((?:https?:\/\/|mailto:)[^\s<>]+)>/,                                                // 6 autolink
  /\b(https?:\/\/[^\s<>"'`]*[^\s<>"'`.,;:!?)\]*_~])/,                                  // 7 bare URL
  /\*\*(?=\S)([\s\S]{0,250}?\S)\*\*/,                                                  // 8 strong
  /(?<![\w\\])__(?=\S)([\s\S]{0,250}?\S)__(?!\w)/,                                     // 9 strong
  /~~(?=\S)([\s\S]{0,250}?\S)~~/,                                                      // 10 strike
  /\*(?=[^\s*])([\s\S]{0,250}?[^\s*\\])\*(?!\*)/,                                      // 11 em
  /(?<![\w\\])_(?=[^\s_])([\s\S]{0,250}?[^\s_\\])_(?!\w)/,                             // 12 em
  /\n/,                                                                                 // line break
].map((r) => r.source).join("|"), "g");

// The link target if it is an http(s) or mailto URL (browsers drop control characters and
// spaces inside a scheme, so they are dropped before the check), else null.
function safeUrl(url) {
  const u = url.replace(/[\x00-\x20\x7f]/g, "");
  return /^(?:https?:\/\/|mailto:)/i.test(u) ? u : null;
}

function link(url, html) {
  const u = safeUrl(url);
  return u ? '<a href="' + esc(u) + '" target="_blank" rel="noopener noreferrer">' + html + "</a>" : html;
}

function inline(text, depth = 0) {
  if (depth > 8) return esc(text).replace(/\n/g, "<br>");
  let out = "", last = 0;
  INLINE.lastIndex = 0;
  const matches = [...text.matchAll(INLINE)];
  for (const m of matches) {
    out += esc(text.slice(last, m.index));
    last = m.index + m[0].length;
    const d = depth + 1;
    if (m[1] !== undefined) out += esc(m[1]);
    else if (m[3] !== undefined) out += "<code>" + esc(m[3].replace(/\n/g, " ")) + "</code>";
    else if (m[4] !== undefined) out += link(m[5], inline(m[4], d));
    else if (m[6] !== undefined) out += link(m[6], esc(m[6]));
    else if (m[7] !== undefined) out += link(m[7], esc(m[7]));
    else if (m[8] !== undefined) out += "<strong>" + inline(m[8], d) + "</strong>";
    else if (m[9] !== undefined) out += "<strong>" + inline(m[9], d) + "</strong>";
    else if (m[10] !== undefined) out += "<del>" + inline(m[10], d) + "</del>";
    else if (m[11] !== undefined) out += "<em>" + inline(m[11], d) + "</em>";
    else if (m[12] !== undefined) out += "<em>" + inline(m[12], d) + "</em>";
    else out += "<br>";
  }
  return out + esc(text.slice(last));
}

const BLOCK = {
  blank: /^[ \t]*$/,
  fence: /^( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$/,
  heading: /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/,
  hr: /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/,
  quote: /^ {0,3}> ?/,
  item: /^([ \t]*)([-*+]|\d{1,9}[.)])(?:[ \t]+|$)/,
  tableRule: /^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/,
};

function indentOf(line) {
  let n = 0;
  for (const ch of line) {
    if (ch === " ") n++;
    else if (ch === "\t") n += 4 - n % 4;
    else break;
  }
  return n;
}

// line without its first n columns of indentation (a tab counts to the next multiple of 4).
function dedent(line, n) {
  let col = 0, k = 0;
  while (k < line.length && col < n) {
    if (line[k] === " ") col++;
    else if (line[k] === "\t") {
      const w = 4 - col % 4;
      if (col + w > n) return " ".repeat(col + w - n) + line.slice(k + 1);
      col += w;
    } else break;
    k++;
  }
  return line.slice(k);
}

function tableCells(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim());
}

function isTableStart(lines, i) {
  return i + 1 < lines.length && lines[i].includes("|") && lines[i + 1].includes("|") &&
    BLOCK.tableRule.test(lines[i + 1]) && tableCells(lines[i]).length === tableCells(lines[i + 1]).length;
}

function startsBlock(lines, i) {
  const l = lines[i];
  return BLOCK.fence.test(l) || BLOCK.heading.test(l) || BLOCK.hr.test(l) || BLOCK.quote.test(l) ||
    BLOCK.item.test(l) || isTableStart(lines, i);
}

// A list from lines[i] (a list item): [block, index of the first line after it]. Items hold their
// lines with the item's indentation removed, rendered again as Markdown (nested lists, code).
function listBlock(lines, i) {
  const first = BLOCK.item.exec(lines[i]);
  const base = indentOf(first[1]);
  const ordered = /\d/.test(first[2]);
  const items = [];
  let cur = null, blank = false, loose = false;
  // An item at most one column deeper than the first is a sibling; deeper lines belong to the
  // current item (nested lists too).
  const sibling = (m, line) => m && !BLOCK.hr.test(line) && indentOf(line) <= base + 1;
  const inside = (line) => indentOf(line) >= Math.min(cur.indent, base + 2);
  while (i < lines.length) {
    const line = lines[i];
    if (BLOCK.blank.test(line)) {
      let j = i + 1;
      while (j < lines.length && BLOCK.blank.test(lines[j])) j++;
      if (j >= lines.length) break;
      const m = BLOCK.item.exec(lines[j]);
      if (sibling(m, lines[j]) ? /\d/.test(m[2]) !== ordered : !inside(lines[j])) break;
      for (; i < j; i++) cur.lines.push("");
      blank = true;
      continue;
    }
    const m = BLOCK.item.exec(line);
    if (!cur || sibling(m, line)) {
      if (cur && /\d/.test(m[2]) !== ordered) break;
      if (cur && blank) loose = true;
      const rest = line.slice(m[0].length);
      const indent = indentOf(m[1]) + m[2].length + (rest ? indentOf(m[0].slice(m[1].length + m[2].length)) : 1);
      cur = { lines: [rest], indent: Math.min(indent, indentOf(m[1]) + m[2].length + 4) };
      if (!items.length) cur.first = parseInt(m[2], 10);
      items.push(cur);
      blank = false;
      i++;
      continue;
    }
    if (inside(line)) {
      cur.lines.push(dedent(line, Math.min(indentOf(line), cur.indent)));
      i++;
      continue;
    }
    if (!blank && !startsBlock(lines, i)) {  // a lazy continuation of the item's paragraph
      cur.lines.push(line.trimStart());
      i++;
      continue;
    }
    break;
  }
  return [{ type: "list", ordered, first: items[0].first, loose, items: items.map((it) => it.lines.join("\n")) }, i];
}

// The blocks of text, each with its start offset in text. Only complete structure decides where
// a block ends, so the blocks before the last one never change when more text is appended.
function splitBlocks(text) {
  const raw = text.split("\n");
  if (raw.length && raw[raw.length - 1] === "") raw.pop();
  const offsets = [];
  let off = 0;
  const lines = raw.map((l) => {
    offsets.push(off);
    off += l.length + 1;
    return l.endsWith("\r") ? l.slice(0, -1) : l;
  });
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (BLOCK.blank.test(line)) { i++; continue; }
    const start = i;
    let b, m;
    if ((m = BLOCK.fence.exec(line))) {
      const closing = new RegExp("^ {0,3}" + (m[2][0] === "`" ? "`" : "~") + "{" + m[2].length + ",}[ \\t]*$");
      const body = [];
      i++;
      while (i < lines.length && !closing.test(lines[i])) body.push(dedent(lines[i++], m[1].length));
      if (i < lines.length) i++;
      b = { type: "code", lang: m[3], text: body.join("\n") };
    } else if ((m = BLOCK.heading.exec(line))) {
      b = { type: "heading", level: m[1].length, text: m[2] || "" };
      i++;
    } else if (BLOCK.hr.test(line)) {
      b = { type: "hr" };
      i++;
    } else if (BLOCK.quote.test(line)) {
      const body = [];
      while (i < lines.length && BLOCK.quote.test(lines[i])) body.push(lines[i++].replace(BLOCK.quote, ""));
      b = { type: "quote", text: body.join("\n") };
    } else if (BLOCK.item.test(line)) {
      [b, i] = listBlock(lines, i);
    } else if (isTableStart(lines, i)) {
      const rule = tableCells(lines[i + 1]);
      const rows = [tableCells(lines[i])];
      i += 2;
      while (i < lines.length && !BLOCK.blank.test(lines[i]) && lines[i].includes("|") && !startsBlock(lines, i)) {
        rows.push(tableCells(lines[i++]));
      }
      const align = rule.map((c) => c.endsWith(":") ? (c.startsWith(":") ? "center" : "right") : c.startsWith(":") ? "left" : "");
      b = { type: "table", align, rows };
    } else {
      const body = [line.trim()];
      i++;
      while (i < lines.length && !BLOCK.blank.test(lines[i]) && !startsBlock(lines, i)) body.push(lines[i++].trim());
      b = { type: "paragraph", text: body.join("\n") };
    }
    b.start = offsets[start];
    blocks.push(b);
  }
  return blocks;
}

function codeHtml(lang, text) {
  const name = lang.toLowerCase();
  const l = Object.hasOwn(HIGHLIGHT, name) ? HIGHLIGHT[name] : null;
  return '<div class="code"><div class="code-head"><span>' + esc(lang || "text") +
    '</span><button type="button" class="copy-code">Copy</button></div><pre><code' +
    (l ? ' class="language-' + esc(name) + '"' : "") + ">" + (l ? highlight(l, text) : esc(text)) +
    "</code></pre></div>";
}

function renderBlock(b, depth, tight) {
  switch (b.type) {
    case "paragraph": return tight ? inline(b.text) : "<p>" + inline(b.text) + "</p>";
    case "heading": return "<h" + b.level + ">" + inline(b.text) + "</h" + b.level + ">";
    case "hr": return "<hr>";
    case "code": return codeHtml(b.lang, b.text);
    case "quote": return "<blockquote>" + renderMarkdown(b.text, depth + 1) + "</blockquote>";
    case "list": {
      const tag = b.ordered ? "ol" : "ul";
      const start = b.ordered && b.first !== 1 ? ' start="' + b.first + '"' : "";
      return "<" + tag + start + ">" + b.items.map((t) => "<li>" +
        renderMarkdown(t, depth + 1, !b.loose) + "</li>").join("") + "</" + tag + ">";
    }
    case "table": {
      const cols = b.align.length;
      const row = (cells, tag) => "<tr>" + Array.from({ length: cols }, (_, k) =>
        "<" + tag + (b.align[k] ? ' style="text-align:' + b.align[k] + '"' : "") + ">" +
        inline((cells[k] || "").replace(/\\\|/g, "|")) + "</" + tag + ">").join("") + "</tr>";
      return "<table><thead>" + row(b.rows[0], "th") + "</thead><tbody>" +
        b.rows.slice(1).map((r) => row(r, "td")).join("") + "</tbody></table>";
    }
  }
  return "";
}

function renderBlocks(blocks, depth = 0, tight = false) {
  return blocks.map((b) => renderBlock(b, depth, tight)).join("");
}

function renderMarkdown(text, depth = 0, tight = false) {
  if (depth > 12) return "<p>" + inline(text) + "</p>";
  return renderBlocks(splitBlocks(text), depth, tight);
}

// Renders a growing text into el: blocks that can no longer change are rendered once and kept;
// only the text after them (the last, unfinished block) is rendered again on each update.
class MarkdownView {
  constructor(el) {
    this.el = el;
    this.done = 0;  // the length of the text rendered into the kept blocks
    this.tail = document.createElement("div");
    this.tail.className = "md-tail";
    el.replaceChildren(this.tail);
  }

  update(text, final = false) {
    let rest = text.slice(this.done);
    const complete = final ? rest.length : rest.lastIndexOf("\n") + 1;
    if (complete > 0) {
      const blocks = splitBlocks(rest.slice(0, complete));
      const keep = final ? blocks.length : blocks.length - 1;
      if (keep > 0) {
        const used = keep < blocks.length ? blocks[keep].start : rest.length;
        this.tail.insertAdjacentHTML("beforebegin", renderBlocks(blocks.slice(0, keep)));
        this.done += used;
        rest = rest.slice(used);
      }
    }
    this.tail.innerHTML = rest ? renderMarkdown(rest) : "";
  }
}
