// Which series are the user's and which are trainscope's own bookkeeping, and the W&B-style
// sections (by tag prefix) the charts are grouped in. The runs table, the Scalars and the
// Performance views all ask here, so a tag is classified once; the groups themselves are
// data/tag_families.json, which C++ compiles in too (core/tag.h).
import tableJson from '../../data/tag_families.json';

type Group = 'internal' | 'watch' | 'performance';
interface Family { name: string; prefix: string; groups: string[]; unit?: string }
interface KnownTag { tag: string; groups: string[]; unit?: string }
const table = tableJson as { families: Family[]; tags: KnownTag[] };

// A family's tags start with its prefix; a known tag is one whole tag.
function matcher(group: Group): (tag: string) => boolean {
  const prefixes = table.families.filter((f) => f.groups.includes(group)).map((f) => f.prefix);
  const whole = new Set(table.tags.filter((t) => t.groups.includes(group)).map((t) => t.tag));
  return (tag) => whole.has(tag) || prefixes.some((p) => tag.startsWith(p));
}

// The prefix of a family by its name ("grad" -> "grad/"): tags are built from the table.
const PREFIX = new Map(table.families.map((f) => [f.name, f.prefix]));
export function familyTag(family: string, rest: string): string {
  const prefix = PREFIX.get(family);
  if (prefix === undefined) throw new Error(`no tag family ${family} in data/tag_families.json`);
  return prefix + rest;
}
// Whether tag is of the family; the part after its prefix, or null.
export function familyRest(family: string, tag: string): string | null {
  const prefix = PREFIX.get(family);
  return prefix !== undefined && tag.startsWith(prefix) ? tag.slice(prefix.length) : null;
}

// The prefixes of trainscope's own families ("census/, sys/ ..."), for labels.
export function internalPrefixes(): string[] {
  return table.families.filter((f) => f.groups.includes('internal') || f.groups.includes('watch')).map((f) => f.prefix);
}

// Recorded by watch for its own use or for the doctor: not what a user logged.
export const isInternal = matcher('internal');
// Recorded by watch about the optimisation: useful curves, but not the user's metrics.
const isWatch = matcher('watch');
// Shown on the Performance view, not on Scalars.
export const isPerformance = matcher('performance');

export function isUserSeries(tag: string): boolean {
  return !isInternal(tag) && !isWatch(tag);
}

export interface Section {
  key: string;  // the prefix ("train", "val", "census"), "" for tags without one
  title: string;
  tags: string[];
  internal: boolean;  // collapsed until opened
}

const USER_ORDER = [/^train$/, /^val/, /^valid/, /^test$/, /^eval/];
const INTERNAL_ORDER = ['mem', 'perf', 'time', 'input', 'sys', 'census'];
function internalRank(key: string): number {
  const i = INTERNAL_ORDER.indexOf(key);
  return i < 0 ? INTERNAL_ORDER.length : i;
}
function userRank(prefix: string): number {
  const i = USER_ORDER.findIndex((re) => re.test(prefix));
  return i < 0 ? USER_ORDER.length : i;
}

function tagRank(tag: string): number {
  return /loss/.test(tag) ? 0 : /acc|f1|auc|score|ppl|perplexity/.test(tag) ? 1 : 2;
}

// Sections by the tag's first path component: the user's own first (train, val, test, then
// the rest by name), then watch's optimisation curves, then the internal ones (collapsed).
// train/grad_zeroed is internal, so it leaves the train section for its own.
export function sections(tags: string[]): Section[] {
  const by = new Map<string, Section>();
  for (const tag of tags) {
    const slash = tag.indexOf('/');
    let key = slash > 0 ? tag.slice(0, slash) : '';
    const internal = isInternal(tag);
    if (internal && !isInternal(key + '/x')) key = tag;  // a single internal tag under a user prefix
    const id = (internal ? 'i:' : isUserSeries(tag) ? 'u:' : 'w:') + key;
    let s = by.get(id);
    if (!s) {
      s = { key, title: key || 'other', tags: [], internal };
      by.set(id, s);
    }
    s.tags.push(tag);
  }
  const kind = (id: string) => (id.startsWith('u:') ? 0 : id.startsWith('w:') ? 1 : 2);
  const list = [...by.entries()].sort(([a, sa], [b, sb]) => kind(a) - kind(b)
    || (kind(a) === 0 ? userRank(sa.key) - userRank(sb.key) : kind(a) === 2 ? internalRank(sa.key) - internalRank(sb.key) : 0)
    || sa.key.localeCompare(sb.key));
  for (const [, s] of list) s.tags.sort((a, b) => tagRank(a) - tagRank(b) || a.localeCompare(b));
  return list.map(([, s]) => s);
}

// What a series' values count in (seconds, bytes, %), or '' when the table does not say:
// a known tag's unit, else its family's.
const TAG_UNIT = new Map(table.tags.map((t) => [t.tag, t.unit ?? '']));
export function unitOf(tag: string): string {
  return TAG_UNIT.get(tag) || table.families.find((f) => f.unit && tag.startsWith(f.prefix))?.unit || '';
}
