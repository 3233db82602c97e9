// Markdown for the chat page, written for it: paragraphs, headings, lists, block
// quotes, tables, fenced code (with a copy button), bold, italic, strike-through,
// inline code and links. It never parses HTML: every piece of the model's text ends
// up in a text node (textContent, createElement), so a reply carrying <script> or
// <img onerror> shows as those characters and nothing runs. Links go only to http,
// https and mailto addresses, open in a new tab, and carry rel="noopener noreferrer".
"use strict";

const markdown = (() => {
  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

  function node(tag, className, text) {
    const created = document.createElement(tag);
    if (className) created.className = className;
    if (text !== undefined) created.textContent = text;
    return created;
  }

  // Only absolute http(s) and mailto addresses become links; anything else (javascript:,
  // data:, a relative path into this server) stays text.
  function safeHref(address) {
    try {
      const url = new URL(address);
      return ["http:", "https:", "mailto:"].includes(url.protocol) ? url.href : null;
    } catch {
      return null;
    }
  }

  function link(text, address) {
    const href = safeHref(address);
    if (!href) return null;
    const anchor = node("a");
    anchor.href = href;
    anchor.target = "_blank";
    anchor.rel = "noopener noreferrer";
    inline(text, anchor);
    return anchor;
  }

  // Inline spans, leftmost first; the text between them is appended as text nodes.
  const SPAN = new RegExp([
    "\\\\([\\\\`*_{}\\[\\]()#+\\-.!|~>])", // 1: an escaped character
    "(`+)([\\s\\S]*?[^`])\\2(?!`)", // 2, 3: inline code
    "\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*", // 4: bold
    "__(?=\\S)([\\s\\S]*?\\S)__(?!\\w)", // 5: bold
    "\\*(?=[^\\s*])([\\s\\S]*?[^\\s*])\\*", // 6: italic
    "(?<![\\w])_(?=\\S)([\\s\\S]*?\\S)_(?!\\w)", // 7: italic
    "~~(?=\\S)([\\s\\S]*?\\S)~~", // 8: strike-through
    "\\[([^\\]\\n]+)\\]\\(\\s*<?([^\\s)>]+)>?(?:\\s+\"[^\"]*\")?\\s*\\)", // 9, 10: link
    "(https?:\\/\\/[^\\s<>\"]*[^\\s<>\".,:;'!?)\\]])", // 11: a bare address
  ].join("|"), "g");

  function inline(text, parent) {
    let at = 0;
    const matches = [...text.matchAll(SPAN)];
    for (const match of matches) {
      if (match.index < at) continue;
      if (match.index > at) parent.append(text.slice(at, match.index));
      at = match.index + match[0].length;
      let made = null;
      if (match[1] !== undefined) made = document.createTextNode(match[1]);
      else if (match[3] !== undefined) made = node("code", "", match[3].replace(/^ (.*) $/, "$1"));
      else if (match[4] !== undefined || match[5] !== undefined) {
        made = node("strong");
        inline(match[4] ?? match[5], made);
      } else if (match[6] !== undefined || match[7] !== undefined) {
        made = node("em");
        inline(match[6] ?? match[7], made);
      } else if (match[8] !== undefined) {
        made = node("del");
        inline(match[8], made);
      } else if (match[9] !== undefined) {
        made = link(match[9], match[10]);
      } else if (match[11] !== undefined) {
        made = link(match[11], match[11]);
      }
      parent.append(made || match[0]);
    }
    if (at < text.length) parent.append(text.slice(at));
  }

  // A paragraph keeps the writer's line breaks, as chat messages do.
  function paragraph(lines) {
    const element = node("p");
    lines.forEach((line, index) => {
      if (index) element.append(node("br"));
      inline(line.trim(), element);
    });
    return element;
  }

  function copyButton(code) {
    const button = node("button", "copy", "Copy");
    button.type = "button";
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(code.textContent);
      } catch {
        // Without the clipboard API (some browsers over plain http): select and copy.
        const range = document.createRange();
        range.selectNodeContents(code);
        const selection = getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        document.execCommand("copy");
      }
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    });
    return button;
  }

  function codeBlock(language, text) {
    const block = node("div", "code-block");
    const bar = node("div", "code-bar");
    const code = node("code", "", text);
    bar.append(node("span", "language", language || "code"), copyButton(code));
    const pre = node("pre");
    pre.append(code);
    block.append(bar, pre);
    return block;
  }

  function cells(line) {
    let row = line.trim();
    if (row.startsWith("|")) row = row.slice(1);
    if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
    return row.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"));
  }

  function table(header, rule, rows) {
    const alignments = cells(rule).map((cell) =>
      cell.startsWith(":") && cell.endsWith(":") ? "center" : cell.endsWith(":") ? "right" : "");
    const element = node("table");
    const head = node("thead");
    const headRow = node("tr");
    cells(header).forEach((text, index) => {
      const cell = node("th");
      if (alignments[index]) cell.className = "align-" + alignments[index];
      inline(text, cell);
      headRow.append(cell);
    });
    head.append(headRow);
    const body = node("tbody");
    for (const line of rows) {
      const row = node("tr");
      const values = cells(line);
      for (let index = 0; index < headRow.children.length; index++) {
        const cell = node("td");
        if (alignments[index]) cell.className = "align-" + alignments[index];
        inline(values[index] || "", cell);
        row.append(cell);
      }
      body.append(row);
    }
    element.append(head, body);
    // Wide tables scroll inside their own box, never the page.
    const wrapper = node("div", "table-wrap");
    wrapper.append(element);
    return wrapper;
  }

  const indentOf = (line) => line.match(/^\s*/)[0].replace(/\t/g, "    ").length;

  // A list at the first item's indentation; deeper lines belong to the item above them
  // and are rendered as blocks of their own (nested lists, code, paragraphs).
  function list(lines, start) {
    const first = lines[start].match(ITEM);
    const ordered = /\d/.test(first[2]);
    const element = node(ordered ? "ol" : "ul");
    if (ordered && parseInt(first[2], 10) !== 1) element.start = parseInt(first[2], 10);
    const base = indentOf(lines[start]);
    let index = start;
    while (index < lines.length) {
      const match = lines[index].match(ITEM);
      if (!match || indentOf(lines[index]) !== base || /\d/.test(match[2]) !== ordered) break;
      const body = [match[3]];
      index++;
      while (index < lines.length) {
        const line = lines[index];
        if (line.trim() === "") {
          const next = lines[index + 1];
          if (next !== undefined && indentOf(next) > base && next.trim() !== "") {
            body.push("");
            index++;
            continue;
          }
          break;
        }
        if (indentOf(line) <= base && (ITEM.test(line) || FENCE.test(line) || HEADING.test(line))) break;
        body.push(indentOf(line) > base ? line.slice(Math.min(indentOf(line), base + 2)) : line);
        index++;
      }
      const item = node("li");
      const nested = blocks(body);
      // A one-paragraph item is written inline, as most lists are.
      if (nested.length === 1 && nested[0].tagName === "P") item.append(...nested[0].childNodes);
      else item.append(...nested);
      element.append(item);
      while (index < lines.length && lines[index].trim() === "" &&
        lines[index + 1] !== undefined && ITEM.test(lines[index + 1]) && indentOf(lines[index + 1]) === base) index++;
    }
    return { element, next: index };
  }

  function blocks(lines) {
    const made = [];
    let index = 0;
    while (index < lines.length) {
      const line = lines[index];
      if (line.trim() === "") { index++; continue; }
      const fence = line.match(FENCE);
      if (fence) {
        const closing = new RegExp("^ {0,3}" + fence[1][0] + "{" + fence[1].length + ",}\\s*$");
        const code = [];
        index++;
        while (index < lines.length && !closing.test(lines[index])) code.push(lines[index++]);
        index++; // the closing fence (or the end of a reply still streaming)
        made.push(codeBlock(fence[2], code.join("\n")));
        continue;
      }
      const heading = line.match(HEADING);
      if (heading) {
        const element = node("h" + Math.min(heading[1].length + 2, 6));
        inline(heading[2], element);
        made.push(element);
        index++;
        continue;
      }
      if (RULE.test(line)) { made.push(node("hr")); index++; continue; }
      if (QUOTE.test(line)) {
        const quoted = [];
        while (index < lines.length && QUOTE.test(lines[index])) quoted.push(lines[index++].replace(QUOTE, ""));
        const element = node("blockquote");
        element.append(...blocks(quoted));
        made.push(element);
        continue;
      }
      if (line.includes("|") && index + 1 < lines.length && TABLE_RULE.test(lines[index + 1]) &&
        lines[index + 1].includes("-")) {
        const rows = [];
        let next = index + 2;
        while (next < lines.length && lines[next].includes("|") && lines[next].trim() !== "") rows.push(lines[next++]);
        made.push(table(line, lines[index + 1], rows));
        index = next;
        continue;
      }
      if (ITEM.test(line)) {
        const { element, next } = list(lines, index);
        made.push(element);
        index = next;
        continue;
      }
      const text = [];
      while (index < lines.length && lines[index].trim() !== "" && !FENCE.test(lines[index]) &&
        !HEADING.test(lines[index]) && !QUOTE.test(lines[index]) &&
        !(text.length && ITEM.test(lines[index])) &&
        !(lines[index].includes("|") && TABLE_RULE.test(lines[index + 1] || "") && (lines[index + 1] || "").includes("-"))) {
        text.push(lines[index++]);
      }
      if (text.length === 0) text.push(lines[index++]);
      made.push(paragraph(text));
    }
    return made;
  }

  return {
    // Replaces `target`'s children with `source` rendered.
    render(target, source) {
      target.replaceChildren(...blocks(source.replace(/\r\n?/g, "\n").split("\n")));
    },
  };
})();
