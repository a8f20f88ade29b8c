"""The inspector's HTML: Jinja2 templates with autoescaping on (stored text renders inert)."""

from __future__ import annotations

BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{% block title %}{% endblock %} · langmem-trpc</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 22px;display:flex;gap:18px;align-items:center}
header a{color:#cfe0ff;text-decoration:none}header b{color:#fff}
main{padding:18px 22px;max-width:1400px}
h1{font-size:20px;margin:4px 0 14px}h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #dde1e8}
th,td{text-align:left;padding:6px 9px;border-bottom:1px solid #eceef2;vertical-align:top}
th{background:#eef1f6;font-weight:600;font-size:12px;text-transform:uppercase;color:#4a5263}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
form.inline{display:inline}
.filters{background:#fff;border:1px solid #dde1e8;padding:10px;margin-bottom:12px;display:flex;gap:10px;flex-wrap:wrap;align-items:end}
label{font-size:12px;color:#4a5263;display:flex;flex-direction:column;gap:2px}
input,select,textarea{font:inherit;padding:4px 6px;border:1px solid #c4cad5;border-radius:4px}
textarea{width:100%;min-height:70px}
button{font:inherit;padding:5px 12px;border-radius:4px;border:1px solid #3a6fd8;background:#3a6fd8;color:#fff;cursor:pointer}
button.danger{background:#c7392f;border-color:#c7392f}button.plain{background:#fff;color:#3a6fd8}
.badge{display:inline-block;padding:1px 7px;border-radius:10px;font-size:12px;background:#e4e9f2}
.badge.old{background:#e6e0d4;color:#5a4f3c;text-decoration:none}.badge.episode{background:#fde9c8}.badge.fact{background:#d9efe0}.badge.ro{background:#c7392f;color:#fff}
.op-add,.op-restore{color:#177245}.op-update,.op-supersede{color:#3a6fd8}.op-delete,.op-clear{color:#c7392f}
del{background:#fbd5d2;text-decoration:line-through}ins{background:#cdeed6;text-decoration:none}
.muted{color:#7a8295}.card{background:#fff;border:1px solid #dde1e8;padding:12px;margin-bottom:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(220px,1fr));gap:10px}
.up{color:#177245}.down{color:#c7392f}
.ts,td.ts{white-space:nowrap}.notice{background:#d9efe0;border:1px solid #9fd3b1;padding:8px 12px;margin-bottom:12px}
.problem{background:#fbd5d2;border:1px solid #e9a19b;padding:8px 12px;margin-bottom:12px}
.legend{font-size:12px;color:#4a5263;margin:6px 0}.legend dt{font-weight:600;display:inline}.legend dd{display:inline;margin:0 12px 0 4px}
header form{margin-left:auto}
</style></head><body>
<header><b>langmem-trpc</b><a href="/">users</a><a href="/worker">worker</a>
<span class="muted" id="backend">{{ backend }}</span>{% if read_only %}<span class="badge ro">read-only</span>{% endif %}
{% if not public %}<form method="post" action="/logout"><button class="plain" type="submit">log out</button></form>{% endif %}</header>
<main>{% block body %}{% endblock %}</main>
</body></html>"""

INDEX = """{% extends "base" %}{% block title %}Users{% endblock %}{% block body %}
<h1>Users and apps <span class="muted">{{ total_users }} user{{ '' if total_users == 1 else 's' }}</span></h1>
{% for app in apps %}
<h2>{{ app.name }} <span class="muted">{{ app.user_count }} user{{ '' if app.user_count == 1 else 's' }}</span></h2>
<table><tr><th>user</th><th class="num">memories</th><th>last activity</th></tr>
{% for u in app.users %}<tr><td><a href="{{ u.url }}">{{ u.user_id }}</a></td>
<td class="num">{{ u.count }}</td><td class="ts">{{ u.last|ts }}</td></tr>{% endfor %}</table>
{% else %}<p class="muted">No memories yet.</p>{% endfor %}
{% if pages > 1 %}<p id="pages">page {{ page }} of {{ pages }}
{% if page > 1 %}<a href="/?page={{ page - 1 }}">previous</a>{% endif %}
{% if page < pages %}<a href="/?page={{ page + 1 }}">next</a>{% endif %}</p>{% endif %}
{% endblock %}"""

USER = """{% extends "base" %}{% block title %}{{ user.user_id }}{% endblock %}{% block body %}
<h1>{{ user.app_name }} / {{ user.user_id }} <span class="muted">{{ total }} live memor{{ 'y' if total == 1 else 'ies' }}</span></h1>
<form class="filters" method="get" action="/user"><input type="hidden" name="app" value="{{ user.app_name }}"><input type="hidden" name="user" value="{{ user.user_id }}">
{% if f.show == 'deleted' %}<input type="hidden" name="show" value="deleted">{% endif %}
<label>search<input name="q" value="{{ f.q }}" size="30" placeholder="text or question"></label>
<label>mode<select name="mode"><option value="hybrid" {{ 'selected' if f.mode == 'hybrid' }}>hybrid (ranked)</option>
<option value="text" {{ 'selected' if f.mode == 'text' }}>full text (contains)</option></select></label>
<label>kind<select name="kind"><option value="">any</option>{% for k in kinds %}
<option {{ 'selected' if f.kind == k }}>{{ k }}</option>{% endfor %}</select></label>
<label>event after<input name="after" value="{{ f.after }}" size="11" placeholder="2024-05-01"></label>
<label>event before<input name="before" value="{{ f.before }}" size="11"></label>
{% if f.show != 'deleted' %}<label>true as of<input name="as_of" value="{{ f.as_of }}" size="11" placeholder="2024-07-01"></label>
<label>show superseded<input type="checkbox" name="show" value="superseded" {{ 'checked' if f.show == 'superseded' }}></label>{% endif %}
<button type="submit">filter</button>
{% if f.show == 'deleted' %}<a id="show-live" href="/user?{{ qs }}">live</a>{% else %}<a id="show-deleted" href="/user?{{ qs }}&show=deleted">deleted</a>{% endif %}
<a href="/search?{{ qs }}{% if f.q %}&q={{ f.q|urlencode }}{% endif %}">search playground</a>
<a href="/threads?{{ qs }}">threads</a>
<a href="/export.jsonl?{{ qs }}">export JSONL</a></form>
{% if error %}<p class="problem" id="problem">{{ error }}</p>{% endif %}
{% set deleted = f.show == 'deleted' %}{% set ranked = f.q and f.mode == 'hybrid' and not deleted %}
<p class="muted" id="shown">{% if deleted %}<span class="badge ro">deleted</span> {% endif %}{{ shown }} shown{% if f.show == 'superseded' %} (every version, superseded ones included){% elif f.as_of %} (what was true on {{ f.as_of }}){% elif not deleted %} (current versions){% endif %}{% if ranked %}, best first{% elif deleted %}, most recently deleted first (full-text filter){% else %}, most recently updated first{% endif %}</p>
<table><tr><th>id</th><th>kind</th><th>memory</th><th>event time</th><th>participants</th><th>location</th><th>topics</th><th>valid</th><th>updated</th>{% if ranked %}<th class="num">score</th>{% endif %}{% if deleted and not read_only %}<th></th>{% endif %}</tr>
{% for e in entries %}<tr><td><a class="mono" href="/memory?{{ qs }}&id={{ e.id|urlencode }}">{{ e.id[:8] }}</a></td>
<td><span class="badge {{ e.memory.kind.value }}">{{ e.memory.kind.value }}</span></td><td>{{ e.memory.text }}</td>
<td class="ts">{{ e.memory.event_time|ts }}</td><td>{{ e.memory.participants|join(', ') }}</td><td>{{ e.memory.location or '' }}</td>
<td>{{ e.memory.topics|join(', ') }}</td><td class="ts validity">{{ e.valid_from|day }} → {{ e.valid_to|day }}{% if e.superseded_by %}
<a class="badge old" href="/memory?{{ qs }}&id={{ e.superseded_by|urlencode }}">superseded</a>{% elif e.valid_to and e.valid_to <= now %} <span class="badge old">lapsed</span>{% endif %}</td>
<td class="ts">{{ e.updated_at|ts }}</td>{% if ranked %}<td class="num">{{ '%.3f'|format(e.score or 0) }}</td>{% endif %}
{% if deleted and not read_only %}<td><form class="inline" method="post" action="/memory/restore?{{ qs }}&id={{ e.id|urlencode }}"><button type="submit">restore</button></form></td>{% endif %}</tr>
{% else %}<tr><td colspan="11" class="muted">{{ 'No deleted memory matches.' if deleted else 'No memory matches.' }}</td></tr>{% endfor %}</table>
{% if not read_only %}<h2>Purge this user</h2><form class="card" method="post" action="/user/purge?{{ qs }}">
<p>Removes every memory of <b>{{ user.user_id }}</b> in <b>{{ user.app_name }}</b> and its history for good.
Type the user id to confirm.</p><input name="confirm" placeholder="{{ user.user_id }}">
<button class="danger" type="submit">purge user</button></form>{% endif %}
{% endblock %}"""

MEMORY = """{% extends "base" %}{% block title %}memory {{ memory_id[:8] }}{% endblock %}{% block body %}
<h1><a href="/user?{{ qs }}">{{ user.app_name }} / {{ user.user_id }}</a> · <span class="mono">{{ memory_id }}</span>
{% if entry is none %}<span class="badge ro">deleted</span>{% elif entry.superseded_by %}<span class="badge old" id="superseded">superseded</span>{% endif %}</h1>
{% if notice %}<p class="notice" id="notice">{{ notice }}</p>{% endif %}
{% if entry is not none %}<div class="card"><div class="grid">
<div><div class="muted">kind</div><span class="badge {{ entry.memory.kind.value }}">{{ entry.memory.kind.value }}</span></div>
<div><div class="muted">event time</div>{{ entry.memory.event_time|ts }}</div>
<div><div class="muted">participants</div>{{ entry.memory.participants|join(', ') }}</div>
<div><div class="muted">location</div>{{ entry.memory.location or '' }}</div>
<div><div class="muted">topics</div>{{ entry.memory.topics|join(', ') }}</div>
<div><div class="muted">created / updated</div>{{ entry.created_at|ts }} / {{ entry.updated_at|ts }}</div>
<div id="validity"><div class="muted">valid (true in the world)</div>{{ entry.valid_from|ts }} → {{ entry.valid_to|ts or 'now' }}{% if entry.superseded_by %}
<div>superseded by <a class="mono" href="/memory?{{ qs }}&id={{ entry.superseded_by|urlencode }}">{{ entry.superseded_by[:8] }}</a></div>{% endif %}</div></div>
<p id="memory-text">{{ entry.memory.text }}</p>
{% if entry.memory.metadata %}<div class="muted mono">metadata: {{ entry.memory.metadata|tojson }}</div>{% endif %}
{% if entry.superseded_by and not read_only %}<form class="inline" method="post" action="/memory/restore-version?{{ mqs }}">
<button type="submit" id="restore-version">Restore this version</button> <span class="muted">makes it current again and closes the version that superseded it (both recorded in history)</span></form>{% endif %}</div>
{% endif %}
{% if versions %}<h2>Versions <span class="muted">oldest first</span></h2>
<table id="versions"><tr><th>id</th><th>valid from</th><th>valid to</th><th>memory</th><th></th></tr>
{% for v in versions %}<tr{% if v.id == memory_id %} class="this"{% endif %}><td><a class="mono" href="/memory?{{ qs }}&id={{ v.id|urlencode }}">{{ v.id[:8] }}</a></td>
<td class="ts">{{ v.valid_from|ts }}</td><td class="ts">{{ v.valid_to|ts }}</td><td>{{ v.memory.text }}</td>
<td>{% if v.id == memory_id %}<b>this version</b> {% endif %}{% if v.superseded_by %}<span class="badge old">superseded</span>{% elif v.valid_to and v.valid_to <= now %}<span class="badge old">lapsed</span>{% else %}<span class="badge fact">current</span>{% endif %}</td></tr>
{% endfor %}</table>{% endif %}
<h2>History <span class="muted">oldest first</span></h2>
<table id="history"><tr><th>when</th><th>operation</th><th>change</th><th>source</th></tr>
{% for ev in events %}<tr><td class="ts">{{ ev.at|ts }}</td><td class="op-{{ ev.op }}">{{ ev.op }}</td>
<td>{% for kind, text in ev.diff %}{% if kind == 'del' %}<del>{{ text }}</del>{% elif kind == 'ins' %}<ins>{{ text }}</ins>{% else %}{{ text }}{% endif %}{% endfor %}</td>
<td>{% for k, v in ev.source %}<div><span class="muted">{{ k }}</span> {{ v }}</div>{% else %}<span class="muted">not recorded</span>{% endfor %}</td></tr>
{% endfor %}</table>
{% if entry is not none %}
{% if not read_only %}<h2>Edit</h2><form class="card" method="post" action="/memory/edit?{{ mqs }}">
{% set m = entry.memory %}{% set et = m.event_time.isoformat() if m.event_time else '' %}
<label>text<textarea name="text">{{ m.text }}</textarea></label><input type="hidden" name="orig_text" value="{{ m.text }}"><div class="grid">
<label>kind<select name="kind">{% for k in kinds %}<option {{ 'selected' if m.kind.value == k }}>{{ k }}</option>{% endfor %}</select></label>
<input type="hidden" name="orig_kind" value="{{ m.kind.value }}">
<label>topics (one per line)<textarea name="topics" rows="3">{{ m.topics|join('\n') }}</textarea></label>
<input type="hidden" name="orig_topics" value="{{ m.topics|join('\n') }}">
<label>event time<input name="event_time" value="{{ et }}"></label><input type="hidden" name="orig_event_time" value="{{ et }}">
<label>participants (one per line)<textarea name="participants" rows="3">{{ m.participants|join('\n') }}</textarea></label>
<input type="hidden" name="orig_participants" value="{{ m.participants|join('\n') }}">
<label>location<input name="location" value="{{ m.location or '' }}"></label><input type="hidden" name="orig_location" value="{{ m.location or '' }}"></div>
<p><button type="submit">save</button>
{% if m.kind.value == 'fact' and not entry.superseded_by %}<label style="display:inline"><input type="checkbox" name="supersede" value="yes"> save as a new version (the value changed: keep this one as the past)</label>{% endif %}</p></form>
<form class="inline" method="post" action="/memory/delete?{{ mqs }}"><button class="plain" type="submit">delete (soft)</button></form>
{% endif %}{% elif not read_only and restorable %}<form class="card" method="post" action="/memory/restore?{{ mqs }}">
<p>Deleted (soft). Restore brings it back under the same id with every field as it was; the history records a restore.</p>
<button type="submit">restore</button></form>{% endif %}
{% if not read_only %}<form class="inline" method="post" action="/memory/purge?{{ mqs }}">
<label style="display:inline"><input type="checkbox" name="confirm" value="yes"> really remove it and its history for good</label>
<button class="danger" type="submit">purge</button></form>{% endif %}
{% endblock %}"""

SEARCH = """{% extends "base" %}{% block title %}search playground{% endblock %}{% block body %}
<h1><a href="/user?{{ qs }}">{{ user.app_name }} / {{ user.user_id }}</a> · search playground</h1>
<form class="filters" method="get" action="/search"><input type="hidden" name="app" value="{{ user.app_name }}"><input type="hidden" name="user" value="{{ user.user_id }}"><label>query<input name="q" value="{{ q }}" size="40" autofocus></label>
<label>kind<select name="kind"><option value="">any</option>{% for k in kinds %}<option {{ 'selected' if kind == k }}>{{ k }}</option>{% endfor %}</select></label>
<label>k<input name="k" value="{{ k }}" size="3"></label><button type="submit">explain</button></form>
{% if error %}<p class="problem" id="problem">{{ error }}</p>{% endif %}
{% if ex %}<p class="muted">The same search the agent's memory_search runs (hybrid{% if not ex.has_vectors %}; this backend has no embedder, so keyword only{% endif %}).
Rows below the cut-off were found by a leg but not returned. "without X" is the fused rank with that one signal switched off.</p>
<table id="explain"><tr><th class="num">fused</th><th>memory</th><th class="num">score</th><th class="num">rrf</th>
{% if ex.has_vectors %}<th class="num">vector rank (cosine)</th>{% endif %}<th class="num">keyword rank (score)</th>
{% for s in ex.signals %}<th class="num">without {{ s }}</th>{% endfor %}</tr>
{% for r in ex.rows %}<tr><td class="num">{{ r.fused_rank or '—' }}</td><td><a href="/memory?{{ qs }}&id={{ r.entry.id|urlencode }}">{{ r.entry.memory.text }}</a></td>
<td class="num">{{ '%.3f'|format(r.fused_score) if r.fused_score is not none else '' }}</td><td class="num">{{ '%.4f'|format(r.rrf) if r.rrf is not none else '' }}</td>
{% if ex.has_vectors %}<td class="num">{% if r.vector_rank %}{{ r.vector_rank }} ({{ '%.3f'|format(r.vector_score or 0) }}){% else %}—{% endif %}</td>{% endif %}
<td class="num">{% if r.keyword_rank %}{{ r.keyword_rank }} ({{ '%.3f'|format(r.keyword_score or 0) }}){% else %}—{% endif %}</td>
{% for s in ex.signals %}{% set w = r.without[s] %}<td class="num">{% if w == r.fused_rank %}<span class="muted">{{ w or '—' }}</span>{% elif w is none %}<span class="up">— (signal adds it)</span>{% elif r.fused_rank is none %}<span class="down">{{ w }} (signal drops it)</span>{% elif w > r.fused_rank %}<span class="up">{{ w }} (+{{ w - r.fused_rank }})</span>{% else %}<span class="down">{{ w }} ({{ w - r.fused_rank }})</span>{% endif %}</td>{% endfor %}</tr>
{% else %}<tr><td colspan="12" class="muted">Nothing found by any leg.</td></tr>{% endfor %}</table>
<dl class="legend" id="legend">{% for name, line in legend.items() %}{% if ex.has_vectors or name != 'vector rank' %}<div><dt>{{ name }}</dt><dd>{{ line }}</dd></div>{% endif %}{% endfor %}</dl>{% endif %}
{% endblock %}"""

WORKER = """{% extends "base" %}{% block title %}worker{% endblock %}{% block body %}
<h1>Worker</h1>
<p class="muted">The write path's dead letters (batches that failed every attempt; the cursor moved
past them) of every user, newest first. Retry queues one for its thread's next extraction job.</p>
<form class="filters" method="get" action="/worker"><label>status<select name="status"><option value="">any</option>
{% for s in ['dead', 'retry', 'done'] %}<option {{ 'selected' if shown == s }}>{{ s }}</option>{% endfor %}</select></label>
<button type="submit">filter</button></form>
<h2>Dead letters</h2><table id="dead-letters"><tr><th>id</th><th>user</th><th>thread</th><th>status</th>
<th class="num">attempts</th><th>error</th><th>messages</th><th>updated</th><th></th></tr>
{% for d in letters %}<tr><td class="mono">{{ d.id[:8] }}</td>
<td><a href="/user?{{ qs(d.user) }}">{{ d.app_name }} / {{ d.user_id }}</a></td><td class="mono">{{ d.thread_id }}</td>
<td><span class="badge">{{ d.status.value }}</span></td><td class="num">{{ d.attempts }}</td>
<td class="error">{{ d.error[:300] }}</td><td class="mono">{{ d.message_ids|join(', ') }}</td><td class="ts">{{ d.updated_at|ts }}</td><td>
{% if not read_only and d.status.value == 'dead' %}<form class="inline" method="post" action="/worker/retry">
<input type="hidden" name="id" value="{{ d.id }}"><button type="submit">retry</button></form>{% endif %}</td></tr>
{% else %}<tr><td class="muted" colspan="9">No dead letters.</td></tr>{% endfor %}</table>
<h2>Threads with dead letters</h2>
<p class="muted">Each thread's extraction cursor: how many messages the write path has read, when it last
extracted, and how many of its dead letters are queued for retry (pending) or still dead.</p>
<table id="cursors"><tr><th>user</th><th>thread</th><th class="num">messages read</th><th>last extracted</th>
<th class="num">pending retries</th><th class="num">dead</th></tr>
{% for t in threads %}<tr><td>{{ t.user.app_name }} / {{ t.user.user_id }}</td><td class="mono">{{ t.thread }}</td>
{% if t.cursor %}<td class="num">{{ t.cursor.message_count }}</td><td>{{ t.cursor.last_extracted_at|ts }}</td>
<td class="num">{{ t.cursor.pending_retries }}</td>{% else %}<td colspan="3" class="muted">no cursor</td>{% endif %}
<td class="num">{{ t.dead }}</td></tr>
{% else %}<tr><td colspan="6" class="muted">No thread has dead letters.</td></tr>{% endfor %}</table>
{% endblock %}"""


THREADS = """{% extends "base" %}{% block title %}threads{% endblock %}{% block body %}
<h1><a href="/user?{{ qs }}">{{ user.app_name }} / {{ user.user_id }}</a> · threads</h1>
<p class="muted">Threads named in the history of this user's live memories, with the write path's
extraction cursor for each: how far extraction has read the thread, and when it last ran.</p>
<table id="threads"><tr><th>thread</th><th class="num">writes</th><th>last write</th><th class="num">messages read</th>
<th>last message id</th><th>last extracted</th><th>cursor updated</th></tr>
{% for t in threads %}<tr><td class="mono">{{ t.thread }}</td><td class="num">{{ t.writes }}</td><td>{{ t.last_write|ts }}</td>
{% if t.cursor %}<td class="num">{{ t.cursor.message_count }}</td><td class="mono">{{ t.cursor.last_message_id or '' }}</td>
<td>{{ t.cursor.last_extracted_at|ts }}</td><td>{{ t.cursor.updated_at|ts }}</td>{% else %}<td colspan="4" class="muted">no cursor</td>{% endif %}</tr>
{% else %}<tr><td colspan="7" class="muted">No thread recorded in this user's history.</td></tr>{% endfor %}</table>
{% endblock %}"""

LOGIN = """{% extends "base" %}{% block title %}log in{% endblock %}{% block body %}
<h1>Log in</h1>{% if error %}<p class="problem" id="problem">{{ error }}</p>{% endif %}
<form class="card" method="post" action="/login"><input type="hidden" name="next" value="{{ next }}">
<p>Paste the inspector's token: the one <code>langmem-trpc ui</code> printed, or the one its operator set
(<code>--token</code> / <code>LANGMEM_TRPC_UI_TOKEN</code>). It sets a session cookie for this browser.</p>
<label>token<input type="password" name="token" autocomplete="current-password" autofocus size="40"></label>
<p><button type="submit">log in</button></p></form>
{% endblock %}"""

ERROR = """{% extends "base" %}{% block title %}{{ code }}{% endblock %}{% block body %}
<h1>{{ code }} {{ title }}</h1><p id="error">{{ message }}</p><p><a href="/">back to users</a></p>{% endblock %}"""

TEMPLATES = {
    "base": BASE,
    "index": INDEX,
    "user": USER,
    "memory": MEMORY,
    "search": SEARCH,
    "worker": WORKER,
    "threads": THREADS,
    "login": LOGIN,
    "error": ERROR,
}
