// Dwara's operator console: the services of the active generation with
// their splits, flip, weights and kill; the history with diffs and
// rollbacks; the canary groups; the gateways and the audit log. Everything
// comes from the REST API of this origin, and the server-sent events of
// /api/v1/events keep it current without a reload.
import {html, render, useCallback, useEffect, useMemo, useRef, useState} from './vendor/htm-preact-standalone.module.js';
import {api, setToken, streamEvents, token} from './api.js';
import {CanaryChart} from './chart.js';

// Page sizes of the lists; a refresh reloads as many rows as are shown, up
// to the API's limit.
const PAGE = 50;
const MAX_PAGE = 500;
// REFRESH_MS is how often the window figures and the gateways' endpoint
// states, which no event announces, are read again.
const REFRESH_MS = 10000;

const enc = encodeURIComponent;
const sum = xs => xs.reduce((a, b) => a + b, 0);
const ratio = ws => ws.join('/');

function pct(x) {
	if (!Number.isFinite(x)) {
		return '–';
	}
	const v = x * 100;
	if (v === 0 || v === 100) {
		return `${v}%`;
	}
	return `${v < 0.1 ? v.toFixed(2) : v.toFixed(1)}%`;
}

function latency(s) {
	if (!s) {
		return '–';
	}
	if (s < 0.001) {
		return `${Math.round(s * 1e6)} µs`;
	}
	if (s < 1) {
		return `${(s * 1000).toFixed(1)} ms`;
	}
	return `${s.toFixed(2)} s`;
}

function span(seconds) {
	if (seconds % 86400 === 0) {
		return `${seconds / 86400} d`;
	}
	if (seconds % 3600 === 0) {
		return `${seconds / 3600} h`;
	}
	if (seconds % 60 === 0) {
		return `${seconds / 60} min`;
	}
	return `${seconds} s`;
}

const isZeroTime = iso => !iso || iso.startsWith('0001-');

function Time({iso}) {
	if (isZeroTime(iso)) {
		return html`<span class="muted">never</span>`;
	}
	// UTC, zone named, as the CLI and the logs print times: one clock for
	// everyone looking at the same rollout.
	const d = new Date(iso);
	return html`<time datetime=${iso} title=${d.toString()}>${utc(d)}</time>`;
}

// utc formats a time as "2026-12-02 07:35:50 UTC".
function utc(d) {
	return d.toISOString().slice(0, 19).replace('T', ' ') + ' UTC';
}

function ago(iso, now) {
	if (isZeroTime(iso)) {
		return 'never';
	}
	const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
	if (s < 60) {
		return `${s} s ago`;
	}
	if (s < 3600) {
		return `${Math.round(s / 60)} min ago`;
	}
	return `${Math.round(s / 3600)} h ago`;
}

// withWeights returns a copy of spec with the split of service set to weights.
function withWeights(spec, service, weights) {
	const s = structuredClone(spec);
	const svc = s.services.find(x => x.name === service);
	svc.split.targets.forEach((t, i) => {
		t.weight = weights[i];
	});
	return s;
}

// dryRun returns the impact of publishing spec (a Diff, against the active
// generation), storing nothing.
async function dryRun(spec) {
	const r = await api('POST', '/api/v1/generations?dry_run=true', {body: {spec}});
	return r.impact;
}

function ProblemView({error}) {
	const p = error.problem || {title: String(error.message || error)};
	return html`<div class="problem" role="alert">
		<strong>${p.title || 'Error'}${p.status ? ` (${p.status})` : ''}</strong>
		${p.detail && html`<p>${p.detail}</p>`}
		${p.errors && p.errors.length > 0 && html`<ul class="field-errors">
			${p.errors.map(e => html`<li><code>${e.path || '(document)'}</code>: ${e.message}</li>`)}
		</ul>`}
		${p.request_id && html`<p class="rid">Request id <code>${p.request_id}</code></p>`}
	</div>`;
}

// ---- Data ----------------------------------------------------------------

// useDashboard holds what the API says and reloads parts of it on demand:
// refresh('current', 'canary', ...) or refresh('all'), coalesced. A part's
// answer is kept only if it is the newest asked for.
function useDashboard({onUnauthorized, report}) {
	const [data, setData] = useState({});
	const pending = useRef(new Set());
	const timer = useRef(0);
	const seq = useRef({});
	const sizes = useRef({generations: PAGE, audit: PAGE});
	const hooks = useRef({});
	hooks.current = {onUnauthorized, report};

	const loaders = {
		current: () => api('GET', '/api/v1/generations/current').catch(e => {
			if (e.status === 404) {
				return null; // nothing published yet
			}
			throw e;
		}),
		generations: () => api('GET', `/api/v1/generations?limit=${sizes.current.generations}`),
		canary: async () => {
			const list = await api('GET', '/api/v1/canary');
			const events = {};
			await Promise.all(list.items.map(async g => {
				const page = await api('GET', `/api/v1/canary/events?service=${enc(g.service)}&generation=${g.generation_id}&limit=200`);
				events[g.service] = page.items;
			}));
			return {groups: list.items, events};
		},
		gateways: () => api('GET', '/api/v1/gateways?all=true').then(l => l.items),
		audit: () => api('GET', `/api/v1/audit?limit=${sizes.current.audit}`),
	};

	const flush = async () => {
		timer.current = 0;
		const parts = pending.current;
		pending.current = new Set();
		const names = Object.keys(loaders).filter(k => parts.has(k) || parts.has('all'));
		let unauthorized = false;
		await Promise.all(names.map(async name => {
			const mine = (seq.current[name] || 0) + 1;
			seq.current[name] = mine;
			try {
				const value = await loaders[name]();
				if (seq.current[name] === mine) {
					setData(d => ({...d, [name]: value}));
				}
			} catch (e) {
				if (e.status === 401) {
					unauthorized = true;
				} else {
					hooks.current.report(e, `Reading ${name}`);
				}
			}
		}));
		if (unauthorized) {
			hooks.current.onUnauthorized();
		}
	};
	const flushRef = useRef(flush);
	flushRef.current = flush;

	const refresh = useCallback((...parts) => {
		parts.forEach(p => pending.current.add(p));
		if (!timer.current) {
			timer.current = setTimeout(() => flushRef.current(), 30);
		}
	}, []);

	// more loads the next page of generations or audit and keeps the longer
	// list for the next refresh.
	const more = useCallback(async (list, cursor) => {
		const path = list === 'generations' ? '/api/v1/generations' : '/api/v1/audit';
		const page = await api('GET', `${path}?limit=${PAGE}&cursor=${enc(cursor)}`);
		setData(d => {
			const items = [...d[list].items, ...page.items];
			sizes.current[list] = Math.min(MAX_PAGE, items.length);
			return {...d, [list]: {items, next_cursor: page.next_cursor}};
		});
	}, []);

	return {data, refresh, more};
}

// ---- Dialogs -------------------------------------------------------------

let dialogSeq = 0;

// Modal is a native modal <dialog>: focus moves into it and stays there,
// Escape closes it, and the page behind is inert.
function Modal({title, kind, onClose, children}) {
	const ref = useRef(null);
	const close = useRef(onClose);
	close.current = onClose;
	const id = useMemo(() => `dialog-${++dialogSeq}`, []);
	useEffect(() => {
		const d = ref.current;
		const onCloseEvent = () => close.current();
		d.addEventListener('close', onCloseEvent);
		if (!d.open) {
			d.showModal();
		}
		return () => {
			d.removeEventListener('close', onCloseEvent);
			if (d.open) {
				d.close();
			}
		};
	}, []);
	return html`<dialog ref=${ref} class="modal" aria-labelledby=${id} data-dialog=${kind}>
		<h2 id=${id}>${title}</h2>
		${children}
	</dialog>`;
}

function ImpactView({state, service, sticky}) {
	if (!state) {
		return null;
	}
	if (state.loading) {
		return html`<p class="impact muted" aria-live="polite">Computing the share of traffic this moves…</p>`;
	}
	if (state.error) {
		return html`<${ProblemView} error=${state.error}/>`;
	}
	return html`<${DiffView} diff=${state.value} service=${service} sticky=${sticky}/>`;
}

// ConfirmDialog asks before a change: req has title, body, confirm (the
// button's label), danger, withMessage (an optional message field),
// preview (a function returning the Diff the change makes) and run(message).
function ConfirmDialog({req, onClose}) {
	const [message, setMessage] = useState('');
	const [busy, setBusy] = useState(false);
	const [error, setError] = useState(null);
	const [impact, setImpact] = useState(req.preview ? {loading: true} : null);
	useEffect(() => {
		if (!req.preview) {
			return undefined;
		}
		let current = true;
		req.preview().then(value => current && setImpact({value}), e => current && setImpact({error: e}));
		return () => {
			current = false;
		};
	}, []);
	const submit = async e => {
		e.preventDefault();
		setBusy(true);
		setError(null);
		try {
			await req.run(message.trim());
			onClose();
		} catch (err) {
			setError(err);
			setBusy(false);
		}
	};
	return html`<${Modal} title=${req.title} kind="confirm" onClose=${onClose}>
		<form onSubmit=${submit}>
			<div class="modal-body">${req.body}</div>
			<${ImpactView} state=${impact} service=${req.service} sticky=${req.sticky}/>
			${req.withMessage && html`<label class="field">Message (optional)
				<input type="text" maxlength="1024" value=${message} onInput=${e => setMessage(e.currentTarget.value)}/>
			</label>`}
			${error && html`<${ProblemView} error=${error}/>`}
			<div class="actions">
				<button type="button" onClick=${onClose} autofocus>Cancel</button>
				<button type="submit" class=${req.danger ? 'danger' : 'primary'} disabled=${busy} data-confirm>${req.confirm}</button>
			</div>
		</form>
	</${Modal}>`;
}

function TokenDialog({reason, onSave, onClose}) {
	const [value, setValue] = useState('');
	return html`<${Modal} title="Admin token" kind="token" onClose=${onClose}>
		<form onSubmit=${e => {
			e.preventDefault();
			onSave(value.trim());
		}}>
			${reason && html`<p class="problem" role="alert">${reason}</p>`}
			<p>The API wants <code>Authorization: Bearer …</code> with the server's admin token
				(<code>DWARA_ADMIN_TOKEN</code>). The dashboard keeps it in this tab only (sessionStorage)
				and sends it to this server only.</p>
			<label class="field">Token
				<input type="password" autocomplete="off" spellcheck="false" required autofocus data-token-input
					value=${value} onInput=${e => setValue(e.currentTarget.value)}/>
			</label>
			<div class="actions">
				<button type="button" onClick=${onClose}>Cancel</button>
				${token() && html`<button type="button" onClick=${() => onSave('')}>Forget the token</button>`}
				<button type="submit" class="primary" data-confirm>Use this token</button>
			</div>
		</form>
	</${Modal}>`;
}

// ---- Services ------------------------------------------------------------

function SplitBar({kind, label, targets, weights}) {
	const total = sum(weights);
	const said = targets.map((t, i) => `${t.upstream} ${weights[i]} (${pct(weights[i] / total)})`).join(', ');
	return html`<div class="split">
		<div class="split-label">${label} <span class="ratio" data-ratio=${kind}>${ratio(weights)}</span></div>
		<div class="bar" data-kind=${kind} role="img" aria-label=${`${label}: ${said}`}>
			${targets.map((t, i) => html`<div class=${`seg seg-${i % 8}`} data-upstream=${t.upstream} data-weight=${weights[i]}
				hidden=${weights[i] === 0} style=${{flexGrow: weights[i]}} title=${`${t.upstream} ${pct(weights[i] / total)}`}>
				${labelled(weights[i], total) ? html`<span>${t.upstream} ${pct(weights[i] / total)}</span>` : ''}
			</div>`)}
		</div>
		${targets.some((_, i) => weights[i] > 0 && !labelled(weights[i], total)) && html`<div class="bar-legend">
			${targets.map((t, i) => weights[i] > 0 && !labelled(weights[i], total) && html`<span data-slice-label=${t.upstream}>
				<span class=${`swatch seg-${i % 8}`} aria-hidden="true"></span>${t.upstream} ${pct(weights[i] / total)}</span>`)}
		</div>`}
	</div>`;
}

// labelled reports whether a slice of weight w of total is wide enough for
// its label inside the bar; a narrower one is labelled under it.
function labelled(w, total) {
	return w / total >= 0.12;
}

// endpointStates returns the endpoints of upstream (the spec's, and any a
// gateway reports) with how many gateways report each up and down.
function endpointStates(spec, gateways, upstream) {
	const u = spec.upstreams.find(x => x.name === upstream);
	const states = new Map((u ? u.endpoints : []).map(e => [e, {endpoint: e, up: 0, down: 0, inFlight: 0}]));
	for (const g of gateways || []) {
		for (const e of g.endpoints || []) {
			if (e.upstream !== upstream) {
				continue;
			}
			if (!states.has(e.endpoint)) {
				states.set(e.endpoint, {endpoint: e.endpoint, up: 0, down: 0, inFlight: 0});
			}
			const s = states.get(e.endpoint);
			if (e.up) {
				s.up++;
			} else {
				s.down++;
			}
			s.inFlight += e.in_flight;
		}
	}
	return [...states.values()];
}

function Endpoint({s}) {
	const n = s.up + s.down;
	let cls = 'unknown';
	let text = 'not reported yet';
	if (n > 0 && s.down === 0) {
		cls = 'up';
		text = n === 1 ? 'up' : `up on all ${n} gateways`;
	} else if (n > 0) {
		cls = 'down';
		text = s.up === 0 ? 'down' : `down on ${s.down} of ${n} gateways`;
	}
	return html`<li class=${`ep ep-${cls}`} data-endpoint=${s.endpoint} data-health=${cls}>
		<span class="dot" aria-hidden="true"></span><code>${s.endpoint}</code> <span class="ep-state">${text}</span>
		${s.inFlight > 0 && html`<span class="muted">, ${s.inFlight} in flight</span>`}
	</li>`;
}

// Targets is the table of a service's targets: each one's weight (the
// configured one, and the one in force when the canary controller set
// another: inForce), its share of traffic as it is served now, and its
// endpoints.
function Targets({svc, spec, gateways, inForce}) {
	const targets = svc.split ? svc.split.targets : [{upstream: svc.upstream, weight: 1}];
	const configured = targets.map(t => t.weight);
	const ws = inForce || configured;
	const total = sum(ws);
	return html`<div class="table-wrap"><table class="targets">
		<thead><tr><th scope="col">Target</th><th scope="col">Weight</th><th scope="col" class="col-share">Share</th><th scope="col">Endpoints</th></tr></thead>
		<tbody>${targets.map((t, i) => html`<tr data-target=${t.upstream}>
			<th scope="row"><span class=${`swatch seg-${i % 8}`} aria-hidden="true"></span>${t.upstream}${svc.split && i === 0 ? html` <span class="muted">baseline</span>` : ''}</th>
			<td>${!svc.split ? '–' : inForce
				? html`<span data-in-force-weight>${ws[i]}</span> <span class="muted">in force (configured ${configured[i]})</span>`
				: ws[i]}</td>
			<td class="col-share" data-share>${pct(ws[i] / total)}</td>
			<td><ul class="eps">${endpointStates(spec, gateways, t.upstream).map(s => html`<${Endpoint} s=${s}/>`)}</ul></td>
		</tr>`)}</tbody>
	</table></div>`;
}

function WeightsEditor({svc, spec, generation, mutate, onDone}) {
	const targets = svc.split.targets;
	const start = useMemo(() => targets.map(t => t.weight), [generation]);
	const total0 = sum(start);
	const [w, setW] = useState(start);
	const [keep, setKeep] = useState(true);
	const [message, setMessage] = useState('');
	const [preview, setPreview] = useState(null);
	const [saving, setSaving] = useState(false);
	const [error, setError] = useState(null);
	const seq = useRef(0);
	const total = sum(w);
	const changed = w.some((v, i) => v !== start[i]);
	const max = keep ? total0 : Math.max(100, 2 * total0);

	const set = (i, raw) => {
		if (raw === '') {
			return; // a field being retyped
		}
		let v = Math.floor(Number(raw));
		if (!Number.isFinite(v) || v < 0) {
			return;
		}
		const next = [...w];
		if (keep && targets.length > 1) {
			// The change is balanced on the baseline, or on the second
			// target when the baseline itself is edited.
			const j = i === 0 ? 1 : 0;
			v = Math.min(v, w[i] + w[j]);
			next[j] = w[i] + w[j] - v;
		}
		next[i] = v;
		setW(next);
	};

	useEffect(() => {
		const mine = ++seq.current;
		if (!changed) {
			setPreview(null);
			return undefined;
		}
		setPreview({loading: true});
		const t = setTimeout(() => {
			dryRun(withWeights(spec, svc.name, w)).then(
				value => mine === seq.current && setPreview({value}),
				e => mine === seq.current && setPreview({error: e}));
		}, 200);
		return () => clearTimeout(t);
	}, [w.join(',')]);

	const save = async e => {
		e.preventDefault();
		setSaving(true);
		setError(null);
		const weights = Object.fromEntries(targets.map((t, i) => [t.upstream, w[i]]));
		const body = {weights};
		if (total !== total0) {
			body.allow_reshuffle = true;
		}
		if (message.trim()) {
			body.message = message.trim();
		}
		try {
			await mutate(() => api('PUT', `/api/v1/services/${enc(svc.name)}/weights`, {body, ifMatch: generation}));
			onDone();
		} catch (err) {
			setError(err);
			setSaving(false);
		}
	};

	const id = i => `w-${svc.name}-${i}`;
	return html`<form class="editor" data-editor=${svc.name} onSubmit=${save}>
		<fieldset>
			<legend>Weights of ${svc.name}</legend>
			${targets.map((t, i) => html`<div class="weight-row">
				<label for=${id(i)}>${t.upstream}${i === 0 ? html` <span class="muted">baseline</span>` : ''}</label>
				<input type="range" min="0" max=${max} step="1" value=${w[i]} aria-label=${`${t.upstream}: weight`}
					onInput=${e => set(i, e.currentTarget.value)}/>
				<input id=${id(i)} type="number" min="0" step="1" inputmode="numeric" value=${w[i]} data-weight-input=${t.upstream}
					onInput=${e => set(i, e.currentTarget.value)}/>
				<span class="share">${pct(w[i] / total)}</span>
			</div>`)}
			${targets.length > 1 && html`<label class="check">
				<input type="checkbox" checked=${keep} onChange=${e => setKeep(e.currentTarget.checked)}/>
				Keep the total at ${total0} (a change balances on ${targets.length > 2 ? 'the baseline' : 'the other target'})
			</label>`}
		</fieldset>
		<p class=${total !== total0 ? 'warn' : 'muted'}>Total ${total}${total !== total0
			? `, was ${total0}: changing the total reshuffles keys across every target, and saving allows it`
			: ''}.</p>
		<div class="preview" aria-live="polite">
			${preview ? html`<${ImpactView} state=${preview} service=${svc.name} sticky=${!!svc.sticky}/>`
				: html`<p class="muted">Change a weight to see the share of ${svc.sticky ? 'sessions' : 'traffic'} it moves.</p>`}
		</div>
		<label class="field">Message (optional)
			<input type="text" maxlength="1024" value=${message} onInput=${e => setMessage(e.currentTarget.value)}/>
		</label>
		${error && html`<${ProblemView} error=${error}/>`}
		<div class="actions">
			<button type="button" onClick=${onDone}>Cancel</button>
			<button type="submit" class="primary" data-action="save-weights" disabled=${!changed || saving}>Save ${ratio(w)}</button>
		</div>
	</form>`;
}

function analysisText(ca) {
	const metric = th => {
		const name = th.metric.replace('_', ' ');
		const rel = th.relative && [th.relative.margin && `baseline + ${th.relative.margin}`,
			th.relative.factor && `baseline × ${th.relative.factor}`].filter(Boolean).join(' and ');
		return [th.threshold && `${name} ${th.threshold}`, rel && `${name} ${rel}`].filter(Boolean).join(' or ');
	};
	const moves = ca.steps && ca.steps.length > 0 ? `steps ${ca.steps.map(p => `${p}%`).join(' → ')}` : `steps of ${ca.step}`;
	const waits = (ca.hold_seconds ? `, hold ${span(ca.hold_seconds)}` : '') + (ca.gate && ca.gate !== 'auto' ? `, gate ${ca.gate}` : '');
	const hooks = ca.webhooks && ca.webhooks.length > 0 ? `; webhooks ${ca.webhooks.map(h => `${h.name} (${h.type.replace('_', ' ')})`).join(', ')}` : '';
	return `${ca.enabled ? 'on' : 'off'}: ${moves}${waits}, ${ca.window_seconds} s window, ` +
		`${ca.min_requests} requests at least, ${ca.cooldown_seconds} s cooldown; ` +
		`promote under ${metric(ca.promote)}, roll back over ${metric(ca.rollback)}${hooks}`;
}

// bytes names a size in bytes the way the spec's limits are written.
function bytes(n) {
	if (n >= 1048576 && n % 1048576 === 0) {
		return `${n / 1048576} MiB`;
	}
	if (n >= 1024 && n % 1024 === 0) {
		return `${n / 1024} KiB`;
	}
	return `${n} bytes`;
}

// mirrorText says what a service's mirror sends where.
function mirrorText(m) {
	const max = m.max_body_bytes ?? 65536;
	return `mirrors ${m.percent}% to ${m.upstream}, ${max === 0 ? 'requests without a body only' : `bodies up to ${bytes(max)}`}`;
}

// useExposures reads GET /api/v1/exposures/summary of service when the
// card appears, when the generation changes, and every REFRESH_MS while the
// page is visible: undefined while loading, then {value} or {error}.
function useExposures(service, generation) {
	const [state, setState] = useState(undefined);
	useEffect(() => {
		const ctrl = new AbortController();
		let busy = false;
		const load = async () => {
			if (busy) {
				return;
			}
			busy = true;
			try {
				const value = await api('GET', `/api/v1/exposures/summary?service=${enc(service)}`, {signal: ctrl.signal});
				setState({value});
			} catch (e) {
				if (e.name !== 'AbortError') {
					setState({error: e});
				}
			} finally {
				busy = false;
			}
		};
		load();
		const id = setInterval(() => {
			if (document.visibilityState === 'visible') {
				load();
			}
		}, REFRESH_MS);
		return () => {
			clearInterval(id);
			ctrl.abort();
		};
	}, [service, generation]);
	return state;
}

// Exposures shows the exposure records of the active generation: their
// count, and the count of each branch.
function Exposures({state, generation}) {
	if (state === undefined) {
		return html`<span class="muted">loading…</span>`;
	}
	if (state.error) {
		return html`<span class="muted" data-exposures-error=${state.error.status}>not available${
			state.error.status === 404 ? '' : ` (${state.error.message})`}</span>`;
	}
	const items = (state.value.items || []).filter(c => c.generation_id === generation);
	const n = sum(items.map(c => c.count));
	if (n === 0) {
		return html`<span class="muted" data-exposures="0">none recorded in generation ${generation} yet</span>`;
	}
	return html`<span data-exposures=${n}><strong>${n}</strong> in generation ${generation}${': '}${
		items.map((c, i) => html`${i ? ', ' : ''}<span data-exposure-branch=${c.branch}>${c.branch} ${c.count}</span>`)}</span>`;
}

// size names a figure in bytes to one decimal: "512 bytes", "1.5 KiB".
function size(n) {
	const units = ['bytes', 'KiB', 'MiB', 'GiB'];
	let i = 0;
	while (n >= 1024 && i < units.length - 1) {
		n /= 1024;
		i++;
	}
	return i === 0 ? `${n} bytes` : `${n.toFixed(1)} ${units[i]}`;
}

// useCacheStats reads GET /api/v1/services/{name}/cache of a service with
// cache: when the card appears, when the generation changes, every
// REFRESH_MS while the page is visible, and on reload(): undefined while
// loading, then {value} or {error}.
function useCacheStats(service, generation, cached) {
	const [state, setState] = useState(undefined);
	const [tick, setTick] = useState(0);
	useEffect(() => {
		if (!cached) {
			return undefined;
		}
		const ctrl = new AbortController();
		let busy = false;
		const load = async () => {
			if (busy) {
				return;
			}
			busy = true;
			try {
				const value = await api('GET', `/api/v1/services/${enc(service)}/cache`, {signal: ctrl.signal});
				setState({value});
			} catch (e) {
				if (e.name !== 'AbortError') {
					setState({error: e});
				}
			} finally {
				busy = false;
			}
		};
		load();
		const id = setInterval(() => {
			if (document.visibilityState === 'visible') {
				load();
			}
		}, REFRESH_MS);
		return () => {
			clearInterval(id);
			ctrl.abort();
		};
	}, [service, generation, cached, tick]);
	return [state, useCallback(() => setTick(t => t + 1), [])];
}

// CacheFigures shows a service's cache in this server's proxy: its hit
// ratio, the requests behind it, and the bytes it holds of its bound.
function CacheFigures({state, purged}) {
	if (state === undefined) {
		return html`<span class="muted">loading…</span>`;
	}
	if (state.error) {
		return html`<span class="muted" data-cache-error=${state.error.status}>not available (${state.error.message})</span>`;
	}
	const c = state.value;
	const ratioText = c.hit_ratio === null ? 'no cacheable request yet' : `${pct(c.hit_ratio)} hit ratio`;
	return html`<span data-cache-stats>
		<strong data-cache-hit-ratio=${c.hit_ratio === null ? '' : c.hit_ratio}>${ratioText}</strong>
		${' '}(<span data-cache-hits=${c.hits}>${c.hits} hits</span>, <span data-cache-misses=${c.misses}>${c.misses} misses</span>${
			c.revalidated ? `, ${c.revalidated} revalidated` : ''}${c.bypassed ? `, ${c.bypassed} bypassed` : ''}),
		${' '}<span data-cache-bytes=${c.bytes}>${size(c.bytes)}</span> of ${bytes(c.max_bytes)} in <span data-cache-entries=${c.entries}>${c.entries} entries</span>
		${' '}<span class="hint">in this server's proxy; each gateway reports its own on /metrics</span>
		${purged && html` <span class="hint" data-cache-purged=${purged.removed}>Last purge${purged.path_prefix ? ` (under ${purged.path_prefix})` : ''}: ${
			purged.removed} entries removed here${purged.notified ? ', and announced to every gateway' : ''}.</span>`}
	</span>`;
}

// matchValue is a condition's pattern as the diff and the CLI write it: as
// it is, or quoted when it would not read as one word.
function matchValue(p) {
	return p === '' || /[\s"]|[^\x20-\x7e\u00a0-\uffff]/.test(p) ? JSON.stringify(p) : p;
}

// matchConditions describes a match rule's conditions, headers then
// cookies, each sorted by name, as the API's diff does: "header
// X-User-Group = beta", "header X-Env starts with eu-", "cookie plan ~ ^pro".
function matchConditions(rule) {
	const ops = {exact: '=', prefix: 'starts with', regex: '~'};
	const conds = (kind, m) => Object.keys(m || {}).sort().map(name => {
		const [op, p] = Object.entries(m[name])[0] || ['', ''];
		return `${kind} ${name} ${ops[op] || '?'} ${matchValue(p)}`;
	});
	return [...conds('header', rule.headers), ...conds('cookie', rule.cookies)];
}

// MatchRules lists a split's match rules in the order they are checked:
// name, conditions, target.
function MatchRules({rules}) {
	return html`<div class="match-rules" data-match-rules>
		<div class="split-label">Match rules, checked in order before the weights: the first that matches decides</div>
		<ol>${rules.map(r => html`<li data-match-rule=${r.name}>
			<strong>${r.name}</strong>${': '}${matchConditions(r).map((c, i) => html`${i ? ' and ' : ''}<code data-condition>${c}</code>`)}
			${' → '}<strong data-target>${r.target}</strong>
		</li>`)}</ol>
	</div>`;
}

function ServiceCard({svc, spec, group, gateways, generation, ask, mutate}) {
	const [editing, setEditing] = useState(false);
	const exposures = useExposures(svc.name, generation);
	const [cacheStats, reloadCache] = useCacheStats(svc.name, generation, !!svc.cache);
	const [purged, setPurged] = useState(null);
	const split = svc.split;
	const targets = split ? split.targets : [];
	const weights = targets.map(t => t.weight);
	const total = sum(weights);
	const inForce = group && group.weights.some((v, i) => v !== weights[i]) ? group.weights : null;
	const ca = split && split.canary_analysis;
	const name = enc(svc.name);
	const sticky = !!svc.sticky;

	const flip = () => {
		const to = [weights[1], weights[0]];
		ask({
			title: `Flip ${svc.name}`,
			body: html`<p class="move" data-move>${svc.name}: ${ratio(weights)} → ${ratio(to)}</p>
				<p>${targets[0].upstream} gets ${to[0]} and ${targets[1].upstream} gets ${to[1]}, in a new generation.</p>`,
			confirm: `Flip to ${ratio(to)}`,
			withMessage: true,
			service: svc.name, sticky,
			preview: () => dryRun(withWeights(spec, svc.name, to)),
			run: message => mutate(() => api('POST', `/api/v1/services/${name}/flip`, {body: message ? {message} : {}, ifMatch: generation})),
		});
	};
	const kill = () => {
		const to = weights.map((_, i) => (i === 0 ? total : 0));
		ask({
			title: `Kill ${svc.name}`,
			body: html`<p class="move" data-move>${svc.name}: ${ratio(weights)} → ${ratio(to)}</p>
				<p>Every target but the baseline, ${targets[0].upstream}, goes to 0, in a new generation.</p>`,
			confirm: 'Kill',
			danger: true,
			withMessage: true,
			service: svc.name, sticky,
			preview: () => dryRun(withWeights(spec, svc.name, to)),
			run: message => mutate(() => api('POST', `/api/v1/services/${name}/kill`, {body: message ? {message} : {}, ifMatch: generation})),
		});
	};

	const purge = () => {
		ask({
			title: `Purge the cache of ${svc.name}`,
			body: html`<p>Every cached answer of ${svc.name} is dropped, in this server's proxy and on every gateway;
				the next request for each page goes to the upstream.</p>`,
			confirm: 'Purge cache',
			danger: true,
			withMessage: true,
			run: async message => {
				const r = await mutate(() => api('POST', `/api/v1/services/${name}/cache/purge`, {body: message ? {message} : {}}));
				setPurged(r);
				reloadCache();
			},
		});
	};

	const headId = `svc-${svc.name}`;
	return html`<article class="card service" data-service=${svc.name} aria-labelledby=${headId}>
		<header class="card-head">
			<h3 id=${headId}>${svc.name}</h3>
			<code class="route">${svc.host || ''}${svc.base_path}</code>
			${group && html`<span class=${`badge state-${group.state}`}>canary ${group.state.replace('_', ' ')}</span>`}
		</header>
		${split ? html`
			<${SplitBar} kind="configured" label="Configured" targets=${targets} weights=${weights}/>
			${inForce && html`<${SplitBar} kind="in-force" label="In force, set by the canary controller" targets=${targets} weights=${inForce}/>`}
			${split.match && split.match.length > 0 && html`<${MatchRules} rules=${split.match}/>`}
		` : html`<p>Every request goes to <strong>${svc.upstream}</strong>.</p>`}
		<dl class="facts">
			<div><dt>Sticky</dt><dd data-sticky>${sticky
				? html`cookie <code>${svc.sticky.cookie}</code>, ${span(svc.sticky.ttl_s)}`
				: 'no: each request is split on its own'}</dd></div>
			${ca && html`<div><dt>Canary analysis</dt><dd>${analysisText(ca)}</dd></div>`}
			${split && split.allocation === 'stable' && html`<div><dt>Allocation</dt><dd data-allocation="stable">stable allocation (10,000 slots)</dd></div>`}
			${svc.override && html`<div><dt>Forced branch</dt><dd data-override>forced by header <code>${svc.override.header}</code>
				<span class="hint">Try a branch: <code>dwara probe ${svc.name}</code></span></dd></div>`}
			${svc.mirror && html`<div><dt>Mirror</dt><dd data-mirror>${mirrorText(svc.mirror)}</dd></div>`}
			<div><dt>Exposures</dt><dd><${Exposures} state=${exposures} generation=${generation}/></dd></div>
			${svc.cache && html`<div><dt>Cache</dt><dd data-cache><${CacheFigures} state=${cacheStats} purged=${purged}/></dd></div>`}
		</dl>
		<${Targets} svc=${svc} spec=${spec} gateways=${gateways} inForce=${inForce}/>
		${(split || svc.cache) && html`<div class="actions">
			${split && targets.length === 2 && html`<button type="button" data-action="flip" onClick=${flip}>Flip</button>`}
			${split && html`<button type="button" data-action="edit-weights" aria-expanded=${editing} onClick=${() => setEditing(!editing)}>Edit weights</button>`}
			${split && html`<button type="button" class="danger" data-action="kill" onClick=${kill}>Kill</button>`}
			${svc.cache && html`<button type="button" class="danger" data-action="purge-cache" onClick=${purge}>Purge cache</button>`}
		</div>`}
		${editing && html`<${WeightsEditor} key=${generation} svc=${svc} spec=${spec} generation=${generation} mutate=${mutate} onDone=${() => setEditing(false)}/>`}
	</article>`;
}

function Services({current, canary, gateways, ask, mutate}) {
	if (current === undefined) {
		return html`<p class="muted">Loading…</p>`;
	}
	if (current === null) {
		return html`<p class="empty">No generation has been published yet. Publish one with <code>dwara apply -f spec.yaml</code>${
			' '}or <code>POST /api/v1/generations</code> (see the <a href="/docs">API docs</a>).</p>`;
	}
	const spec = current.spec;
	const groups = new Map(((canary && canary.groups) || []).map(g => [g.service, g]));
	return html`<div class="cards">${spec.services.map(svc => html`<${ServiceCard} key=${svc.name} svc=${svc} spec=${spec}
		group=${groups.get(svc.name)} gateways=${gateways} generation=${current.id} ask=${ask} mutate=${mutate}/>`)}</div>`;
}

// ---- History -------------------------------------------------------------

// matchDetail is the service detail the API writes for a match change,
// shown apart as the change itself.
const matchDetail = c => `match rule ${c.rule} ${c.change} (${c.details.join('; ')})`;

// MatchesDecide says what a diff cannot count for a service with match
// rules: the requests a rule takes go where the rule says.
function MatchesDecide({s}) {
	const changed = (s.match_changes || []).length > 0;
	return html`<p class="matches-decide" data-matches-decide=${changed ? 'changed' : 'kept'}><strong>Matches decide</strong>${': '}${changed
		? `requests that ${s.name}'s changed match rules match go where the rules now say, whatever the weights; what share of the traffic that moves depends on the traffic, which the weights cannot tell.`
		: `requests that ${s.name}'s match rules match go where the rules say, whatever the weights: they are not counted above, and they do not move.`}</p>`;
}

function DiffView({diff, service, sticky}) {
	const svcs = diff.services.filter(s => s.change !== 'unchanged');
	const ups = diff.upstreams.filter(u => u.change !== 'unchanged');
	const mine = service && diff.services.find(s => s.name === service);
	const whose = s => (s.matches_decide ? ' the weights decide' : '');
	return html`<div class="diff">
		${mine && html`<p class="moved">Moves <strong data-moved-share=${mine.moved_share}>${pct(mine.moved_share)}</strong>${
			` of ${service}'s ${sticky ? 'sessions' : 'traffic'}${whose(mine)} to another target.`}</p>`}
		${mine && mine.matches_decide && html`<${MatchesDecide} s=${mine}/>`}
		${svcs.length + ups.length === 0 ? html`<p class="muted">No change.</p>` : html`<ul class="changes">
			${svcs.map(s => {
				const mc = s.match_changes || [];
				const details = (s.details || []).filter(d => !mc.some(c => matchDetail(c) === d));
				return html`<li data-diff-service=${s.name}>
				<span class=${`chg chg-${s.change}`}>${s.change}</span> service <strong>${s.name}</strong>,
				moves ${pct(s.moved_share)}${s.matches_decide ? ' of what the weights decide' : ''}
				${details.length > 0 && html`<ul class="details">${details.map(d => html`<li>${d}</li>`)}</ul>`}
				${mc.length > 0 && html`<ul class="details match-changes">${mc.map(c => html`<li data-match-change=${c.rule} data-change=${c.change}>
					match rule <strong>${c.rule}</strong> <span class=${`chg chg-${c.change}`}>${c.change}</span>${' '}${c.details.join('; ')}
					${' — '}<em>matches decide</em>
				</li>`)}</ul>`}
				${mc.length > 0 && s.name !== service && html`<${MatchesDecide} s=${s}/>`}
			</li>`;
			})}
			${ups.map(u => html`<li data-diff-upstream=${u.name}>
				<span class=${`chg chg-${u.change}`}>${u.change}</span> upstream <strong>${u.name}</strong>
				${u.details && u.details.length > 0 && html`<ul class="details">${u.details.map(d => html`<li>${d}</li>`)}</ul>`}
			</li>`)}
		</ul>`}
	</div>`;
}

function GenerationRow({g, active, gateways, onRollback}) {
	const [diff, setDiff] = useState(null);
	const toggle = async () => {
		if (diff) {
			setDiff(null);
			return;
		}
		setDiff({loading: true});
		try {
			setDiff({value: await api('GET', `/api/v1/generations/${g.id}/diff`)});
		} catch (e) {
			setDiff({error: e});
		}
	};
	const serving = (gateways || []).filter(gw => gw.applied_generation === g.id);
	return html`<li class=${active ? 'gen active' : 'gen'} data-generation=${g.id} data-action=${g.action}>
		<div class="gen-head">
			<span class="gen-id">#${g.id}</span>
			<span class=${`badge action-${g.action}`}>${g.action}</span>
			${active && html`<span class="badge active">active</span>`}
			<span class="by">by <strong>${g.author}</strong></span>
			<${Time} iso=${g.created_at}/>
		</div>
		${g.message && html`<p class="msg">${g.message}</p>`}
		${g.source_id && html`<p class="muted">The spec of generation ${g.source_id}.</p>`}
		${serving.length > 0 && html`<p class="serving">Applied by ${serving.map((gw, i) => html`${i ? ', ' : ''}<code>${gw.listen}</code>`)}</p>`}
		<div class="actions">
			<button type="button" data-action="diff" aria-expanded=${!!diff} onClick=${toggle}>${diff ? 'Hide the diff' : 'Diff'}</button>
			${!active && html`<button type="button" data-action="rollback" onClick=${() => onRollback(g)}>Roll back to this</button>`}
		</div>
		${diff && (diff.loading ? html`<p class="muted">Loading the diff…</p>`
			: diff.error ? html`<${ProblemView} error=${diff.error}/>` : html`<${DiffView} diff=${diff.value}/>`)}
	</li>`;
}

function History({generations, current, gateways, ask, mutate, more, report}) {
	if (!generations) {
		return html`<p class="muted">Loading…</p>`;
	}
	const activeId = current ? current.id : 0;
	const rollback = g => ask({
		title: `Roll back to generation ${g.id}`,
		body: html`<p class="move" data-move>Generation ${activeId} → the spec of generation ${g.id}</p>
			<p>A new generation (action rollback) gets exactly the spec of generation ${g.id}; history is kept.</p>`,
		confirm: `Roll back to ${g.id}`,
		danger: true,
		withMessage: true,
		preview: () => api('GET', `/api/v1/generations/${g.id}/diff?against=${activeId}`),
		run: message => mutate(() => api('POST', `/api/v1/generations/${g.id}/rollback`, {body: message ? {message} : {}, ifMatch: activeId})),
	});
	const next = generations.next_cursor;
	return html`<div>
		${generations.items.length === 0 && html`<p class="muted">No generation yet.</p>`}
		<ol class="history">
			${generations.items.map(g => html`<${GenerationRow} key=${g.id} g=${g} active=${g.id === activeId} gateways=${gateways} onRollback=${rollback}/>`)}
		</ol>
		${next && html`<button type="button" onClick=${() => more('generations', next).catch(e => report(e, 'Reading generations'))}>Older generations</button>`}
	</div>`;
}

// ---- Canary --------------------------------------------------------------

// Figures is the table of a group's figures over its window; a model
// group's adds the p99 time to the first streamed token (TTFT), which
// its canary_analysis may judge by (ttft_p99).
function Figures({group}) {
	const model = group.kind === 'model';
	const rows = [['Baseline', group.baseline, group.baseline_window], ['Canary', group.canary, group.canary_window]];
	return html`<div class="table-wrap"><table class="figures">
		<caption>The fleet's last ${group.window_seconds} s</caption>
		<thead><tr><th scope="col">Version</th><th scope="col">Upstream</th><th scope="col">Requests</th>
			<th scope="col">Errors</th><th scope="col">Error rate</th><th scope="col">p99</th>
			${model && html`<th scope="col" title="p99 time to the first streamed token">TTFT p99</th>`}</tr></thead>
		<tbody>${rows.map(([name, upstream, f]) => html`<tr data-version=${name.toLowerCase()}>
			<th scope="row">${name}</th><td>${upstream}</td><td data-requests=${f.requests}>${f.requests}</td><td>${f.errors}</td>
			<td data-error-rate=${f.error_rate}>${pct(f.error_rate)}</td><td>${latency(f.latency_p99)}</td>
			${model && html`<td data-ttft=${f.ttft_p99 || 0}>${latency(f.ttft_p99)}</td>`}
		</tr>`)}</tbody>
	</table></div>`;
}

// figures sums up an event's figures of one version; model adds the TTFT
// p99 of a model group.
function figures(f, model) {
	if (!f) {
		return '–';
	}
	return `${pct(f.error_rate)} err, p99 ${latency(f.latency_p99)}${model ? `, TTFT p99 ${latency(f.ttft_p99)}` : ''} (${f.requests} req)`;
}

function pvalue(p) {
	if (p === null || p === undefined) {
		return '–';
	}
	return p < 0.001 ? p.toExponential(1) : p.toPrecision(2);
}

// eventRows pairs each event (newest first) with the results of the
// webhook calls made for it (webhook.event_id); a result made for no
// listed event (a pre_rollout, rollout or confirm_promotion check) is a
// row of its own.
function eventRows(events) {
	const listed = new Set(events.filter(e => e.action !== 'webhook').map(e => e.id));
	const hooks = new Map();
	const rows = [];
	for (const e of events) {
		const id = e.action === 'webhook' && e.webhook ? e.webhook.event_id : 0;
		if (id && listed.has(id)) {
			hooks.set(id, [...(hooks.get(id) || []), e.webhook]);
		}
	}
	for (const e of events) {
		if (e.action !== 'webhook') {
			rows.push({e, hooks: (hooks.get(e.id) || []).reverse()});
		} else if (!e.webhook || !listed.has(e.webhook.event_id)) {
			rows.push({e, hooks: e.webhook ? [e.webhook] : []});
		}
	}
	return rows;
}

// WebhookResult is one call of a webhook: its name and type, whether it
// counted as a success, the status (none when no answer came), how long
// it took, and the error.
function WebhookResult({r}) {
	const d = r.duration_seconds;
	const took = d < 0.001 ? 'under 1 ms' : d < 1 ? `${Math.round(d * 1000)} ms` : `${d.toFixed(1)} s`;
	const answer = `${r.status ? `HTTP ${r.status}` : 'no answer'}, ${took}${r.attempts > 1 ? `, ${r.attempts} attempts` : ''}`;
	return html`<li class=${`hook ${r.ok ? 'hook-ok' : 'hook-fail'}`} data-webhook=${r.name} data-webhook-type=${r.type}
		data-webhook-ok=${String(r.ok)} data-webhook-status=${r.status}>
		<span class=${`badge ${r.ok ? 'ev-promote' : 'warn'}`}>${r.ok ? 'ok' : 'failed'}</span>${' '}
		<strong>${r.name}</strong>${' '}<span class="muted">${r.type.replace('_', ' ')}</span>${`: ${answer}`}
		${r.error ? html`: <span class="hook-error">${r.error}</span>` : ''}
	</li>`;
}

function CanaryEvents({events, model}) {
	return html`<div class="table-wrap"><table class="events">
		<caption>Events of this generation, newest first, with the webhook calls made for each</caption>
		<thead><tr><th scope="col">Time</th><th scope="col">Action</th><th scope="col">Canary weight</th>
			<th scope="col">Baseline</th><th scope="col">Canary</th><th scope="col">p-value</th><th scope="col">Reason, webhooks</th></tr></thead>
		<tbody>${eventRows(events).slice(0, 10).map(({e, hooks}) => html`<tr data-event=${e.id} data-event-action=${e.action}>
			<td><${Time} iso=${e.created_at}/></td>
			<td><span class=${`badge ev-${e.action}`}>${e.action.replace('_', ' ')}</span></td>
			<td>${e.from_weight === e.to_weight ? `at ${e.to_weight}` : `${e.from_weight} → ${e.to_weight}`}</td>
			<td>${figures(e.baseline, model)}</td>
			<td>${figures(e.canary, model)}</td>
			<td>${pvalue(e.p_value)}</td>
			<td>${e.action === 'webhook' && hooks.length > 0 ? '' : html`${e.reason}${e.actor ? ` (${e.actor})` : ''}`}
				${hooks.length > 0 && html`<ul class="hooks" aria-label="Webhook calls">${hooks.map(r => html`<${WebhookResult} r=${r}/>`)}</ul>`}</td>
		</tr>`)}</tbody>
	</table></div>`;
}

// SCHEDULE_REFRESH_MS is how often the canary groups are read again while
// the controller moves one along a schedule or a hold: holds and gates are
// no event of /api/v1/events.
const SCHEDULE_REFRESH_MS = 2000;

// moving reports whether the controller is moving group along its
// schedule or hold now (not waiting for an operator, not done).
const moving = g => g.state === 'running' && !g.gate_waiting && (!!g.schedule || g.hold_seconds > 0);

// useHoldLeft is the seconds left of group's running hold, counted down
// every second from hold_left_seconds as of the answer (the server's
// clock, so a browser's clock that is off does not matter); null when no
// hold runs.
function useHoldLeft(group) {
	const at = useMemo(() => performance.now(), [group]);
	const [, setTick] = useState(0);
	const left = group.hold_left_seconds;
	const running = left !== null && left !== undefined;
	useEffect(() => {
		if (!running) {
			return undefined;
		}
		const id = setInterval(() => setTick(n => n + 1), 1000);
		return () => clearInterval(id);
	}, [running]);
	return running ? Math.max(0, left - (performance.now() - at) / 1000) : null;
}

// share is a canary weight of total as a percent, "5%" or "12.5%".
function share(w, total) {
	const v = total ? w * 100 / total : 0;
	return `${Number.isInteger(v) ? v : v.toFixed(1)}%`;
}

// Schedule shows group's steps as a row, the steps done, the one in force
// (with the weights in force) and the ones ahead, a gate before each step
// that waits for an operator.
function Schedule({group}) {
	const sc = group.schedule;
	const total = sum(group.configured);
	const gated = w => group.gate === 'manual' || (group.gate === 'final' && w >= total);
	const between = sc.step >= 0 && sc.weights[sc.step] !== group.weights[1];
	return html`<ol class="steps" data-schedule=${group.service}
		aria-label=${`Schedule: ${sc.steps.map(p => `${p}%`).join(', ')}; ${sc.step < 0 ? 'below the first step' : `step ${sc.step + 1} of ${sc.steps.length}`}`}>
		${sc.steps.map((p, i) => {
			const w = sc.weights[i];
			const where = i < sc.step ? 'done' : i === sc.step ? 'current' : 'ahead';
			return html`<li class=${`step step-${where}`} data-step=${i} data-step-weight=${w} data-step-state=${where}
				aria-current=${i === sc.step ? 'step' : undefined}>
				${i > 0 && gated(w) && html`<span class="gate-mark" data-gate-before=${i} title="An operator's promote takes this step">gate</span>`}
				<span class="step-share">${p}%</span>
				<span class="step-weight">${total === 100 ? `step ${i + 1}` : `weight ${w}`}</span>
				${i === sc.step && html`<span class="step-now" data-step-in-force>${between ? `at ${share(group.weights[1], total)}, ` : ''}in force ${ratio(group.weights)}</span>`}
			</li>`;
		})}
	</ol>`;
}

// Progress says where group is on its way up: the hold counting down, the
// gate waiting (with the button that passes it), or why nothing moves.
function Progress({group, onPromote}) {
	const left = useHoldLeft(group);
	const total = sum(group.configured);
	const at = share(group.weights[1], total);
	const next = share(group.next_weight, total);
	if (group.gate_waiting) {
		return html`<div class="progress gate" data-gate-waiting>
			<p><strong>The gate waits:</strong> the step ${at} → ${next} waits for an operator (gate ${group.gate}).</p>
			<button type="button" class="primary" data-action="promote" onClick=${onPromote}>Promote to ${next}</button>
		</div>`;
	}
	if (left !== null) {
		const s = Math.ceil(left);
		return html`<div class="progress hold" data-hold>
			<p>${s > 0
				? html`Holding at ${at}: <strong data-hold-left=${s}>${s} s</strong> of ${span(group.hold_seconds)} left before the step to ${next}${group.next_gated ? ', which then waits at the gate' : ''}.`
				: html`Held ${span(group.hold_seconds)} at ${at}: the next clean evaluation ${group.next_gated ? `waits at the gate before ${next}` : `takes the step to ${next}`}.`}</p>
			<progress max=${group.hold_seconds} value=${group.hold_seconds - left} aria-label="Hold"></progress>
		</div>`;
	}
	let text;
	switch (group.state) {
	case 'complete':
		text = 'Complete: the canary holds the whole total.';
		break;
	case 'rolled_back':
		text = 'Rolled back to 0: nothing is judged until an operator restarts the rollout.';
		break;
	case 'running':
		text = group.hold_seconds > 0
			? `At ${at}: a clean evaluation starts the ${span(group.hold_seconds)} hold before the step to ${next}.`
			: `At ${at}: a clean evaluation ${group.next_gated ? `waits at the gate before ${next}` : `takes the step to ${next}`}.`;
		break;
	default:
		text = `At ${at}; the controller does not move it (${group.state.replace('_', ' ')}).`;
	}
	return html`<div class="progress"><p class="muted">${text}</p></div>`;
}

function CanaryGroup({group, events, spec, since, now, ask, mutate}) {
	const name = enc(group.service);
	const hold = action => ask({
		title: `${action === 'pause' ? 'Pause' : 'Resume'} the canary of ${group.service}`,
		body: action === 'pause'
			? html`<p>The controller leaves ${group.service} at ${ratio(group.weights)}, in this generation and the next ones, until it is resumed.</p>`
			: html`<p>The controller judges ${group.service} again, from ${ratio(group.weights)}.</p>`,
		confirm: action === 'pause' ? 'Pause' : 'Resume',
		withMessage: true,
		run: message => mutate(() => api('POST', action === 'pause' ? `/api/v1/services/${name}/canary/pause`
			: `/api/v1/services/${name}/canary/resume`, {body: message ? {message} : {}})),
	});
	const adopt = () => ask({
		title: `Adopt the canary weights of ${group.service}`,
		body: html`<p class="move" data-move>${group.service}: ${ratio(group.configured)} → ${ratio(group.weights)}</p>
			<p>The weights the controller set become the configured ones, in a new generation (action adopt).</p>`,
		confirm: `Adopt ${ratio(group.weights)}`,
		withMessage: true,
		service: group.service,
		preview: () => dryRun(withWeights(spec, group.service, group.weights)),
		run: message => mutate(() => api('POST', `/api/v1/services/${name}/canary/adopt`, {body: message ? {message} : {}, ifMatch: group.generation_id})),
	});
	const next = [sum(group.configured) - group.next_weight, group.next_weight];
	const promote = () => ask({
		title: `Promote the canary of ${group.service}`,
		body: html`<p class="move" data-move>${group.service}: ${ratio(group.weights)} → ${ratio(next)}</p>
			<p>Passes the gate: the canary takes the step up at once, recorded as a promote by the dashboard.</p>`,
		confirm: `Promote to ${ratio(next)}`,
		withMessage: true,
		run: message => mutate(() => api('POST', `/api/v1/services/${name}/canary/promote`, {body: message ? {message} : {}})),
	});
	const staged = group.schedule || group.hold_seconds > 0 || group.gate !== 'auto';
	const headId = `canary-${group.service}`;
	return html`<article class="card canary" data-canary=${group.service} aria-labelledby=${headId}>
		<header class="card-head">
			<h3 id=${headId}>${group.service}</h3>
			${group.kind === 'model' && html`<span class="badge" data-kind="model" title="a model alias of the service">model</span>`}
			<span class=${`badge state-${group.state}`} data-state=${group.state}>${group.state.replace('_', ' ')}</span>
		</header>
		<p>Baseline <strong>${group.baseline}</strong>, canary <strong>${group.canary}</strong>:
			configured ${ratio(group.configured)}, in force <strong data-in-force>${ratio(group.weights)}</strong>
			${group.transient ? ' (set by the controller until the next generation)' : ''}</p>
		${staged && html`<div class="rollout">
			${group.schedule && html`<${Schedule} group=${group}/>`}
			<${Progress} group=${group} onPromote=${promote}/>
		</div>`}
		<${CanaryChart} group=${group} events=${events.filter(e => e.action !== 'webhook')} since=${since} now=${now}/>
		<${Figures} group=${group}/>
		<div class="actions">
			${group.state === 'paused'
				? html`<button type="button" data-action="resume" onClick=${() => hold('resume')}>Resume</button>`
				: html`<button type="button" data-action="pause" disabled=${group.state === 'disabled'} onClick=${() => hold('pause')}>Pause</button>`}
			<button type="button" data-action="adopt" disabled=${!group.transient} onClick=${adopt}
				title=${group.transient ? '' : 'Nothing to adopt: the weights in force are the configured ones'}>Adopt ${ratio(group.weights)}</button>
		</div>
		${events.length > 0 ? html`<${CanaryEvents} events=${events.slice(0, 10)} model=${group.kind === 'model'}/>` : html`<p class="muted">No event in this generation yet.</p>`}
	</article>`;
}

function Canary({canary, current, now, ask, mutate, refresh}) {
	const fast = !!canary && canary.groups.some(moving);
	useEffect(() => {
		if (!fast) {
			return undefined;
		}
		const id = setInterval(() => {
			if (document.visibilityState === 'visible') {
				refresh('canary');
			}
		}, SCHEDULE_REFRESH_MS);
		return () => clearInterval(id);
	}, [fast]);
	if (!canary || current === undefined) {
		return html`<p class="muted">Loading…</p>`;
	}
	if (canary.groups.length === 0) {
		return html`<p class="muted">No service of the active generation has canary analysis.</p>`;
	}
	return html`<div class="cards">${canary.groups.map(g => html`<${CanaryGroup} key=${g.service} group=${g}
		events=${canary.events[g.service] || []} spec=${current && current.spec} since=${current && current.created_at}
		now=${now} ask=${ask} mutate=${mutate}/>`)}</div>`;
}

// ---- Gateways and audit --------------------------------------------------

// liveGateways is the gateways that are not stale (no heartbeat for 15 s): only
// they count in endpoint states and in who serves a generation.
function liveGateways(gateways) {
	return gateways && gateways.filter(g => !g.stale);
}

function Gateways({gateways, current, now}) {
	if (!gateways) {
		return html`<p class="muted">Loading…</p>`;
	}
	if (gateways.length === 0) {
		return html`<p class="muted">No data plane has reported yet.</p>`;
	}
	const active = current ? current.id : 0;
	return html`<div class="table-wrap"><table class="gateways">
		<thead><tr><th scope="col">Instance</th><th scope="col">Proxy</th><th scope="col">Applied</th>
			<th scope="col">Applied at</th><th scope="col">Heartbeat</th><th scope="col">Endpoints up</th><th scope="col">Started</th></tr></thead>
		<tbody>${gateways.map(g => {
			const up = g.endpoints.filter(e => e.up).length;
			const stale = g.stale || now - Date.parse(g.last_heartbeat) > 30000;
			return html`<tr data-gateway=${g.id} class=${g.stale ? 'stale' : ''}>
				<th scope="row"><code>${g.id}</code>${g.stale ? html` <span class="badge warn">stale</span>` : ''}</th>
				<td><code>${g.listen}</code></td>
				<td data-applied=${g.applied_generation}>${g.applied_generation ? `#${g.applied_generation}` : 'none'}
					${active && g.applied_generation && g.applied_generation < active ? html` <span class="badge warn">behind</span>` : ''}</td>
				<td><${Time} iso=${g.applied_at}/></td>
				<td class=${stale ? 'warn' : ''}>${ago(g.last_heartbeat, now)}</td>
				<td class=${up < g.endpoints.length ? 'warn' : ''}>${up} of ${g.endpoints.length}</td>
				<td><${Time} iso=${g.started_at}/></td>
			</tr>`;
		})}</tbody>
	</table></div>`;
}

function Audit({audit, more, report}) {
	if (!audit) {
		return html`<p class="muted">Loading…</p>`;
	}
	const next = audit.next_cursor;
	return html`<div>
		<div class="table-wrap"><table class="audit">
			<thead><tr><th scope="col">Time</th><th scope="col">Actor</th><th scope="col">Action</th><th scope="col">Outcome</th>
				<th scope="col">Status</th><th scope="col">Generation</th><th scope="col">Detail</th></tr></thead>
			<tbody>${audit.items.map(a => html`<tr data-audit=${a.id}>
				<td><${Time} iso=${a.at}/></td>
				<td>${a.actor}</td>
				<td>${a.action}</td>
				<td><span class=${`badge outcome-${a.outcome}`}>${a.outcome}</span></td>
				<td>${a.status}</td>
				<td>${a.generation_id ? `#${a.generation_id}` : '–'}</td>
				<td>${a.detail ? html`<details><summary>request ${a.request_id}</summary><pre>${JSON.stringify(a.detail, null, 2)}</pre></details>`
					: html`<code class="muted">${a.request_id}</code>`}</td>
			</tr>`)}</tbody>
		</table></div>
		${audit.items.length === 0 && html`<p class="muted">No change has been asked for yet.</p>`}
		${next && html`<button type="button" onClick=${() => more('audit', next).catch(e => report(e, 'Reading the audit log'))}>Older entries</button>`}
	</div>`;
}

// ---- The page ------------------------------------------------------------

const LIVE_TEXT = {
	connecting: 'Connecting…',
	live: 'Live',
	reconnecting: 'Reconnecting…',
	unauthorized: 'Needs the token',
};

let noticeSeq = 0;

// Notices shows the errors at the top of the page, until dismissed, and
// what happened (the dashboard's own changes, the events of others) as
// toasts that go by themselves.
function Notices({notices, dismiss}) {
	const errors = notices.filter(n => n.kind === 'error');
	const infos = notices.filter(n => n.kind !== 'error');
	const close = n => html`<button type="button" class="close" aria-label="Dismiss" onClick=${() => dismiss(n.id)}>×</button>`;
	return html`
		<div class="notices">${errors.map(n => html`<div key=${n.id} class="notice notice-error">
			<p><strong>${n.context}</strong></p><${ProblemView} error=${n.error}/>${close(n)}
		</div>`)}</div>
		<div class="toasts" role="status" aria-live="polite">${infos.map(n => html`<div key=${n.id} class="notice notice-info">
			<p>${n.text}</p>${close(n)}
		</div>`)}</div>`;
}

function Section({id, title, children, wide}) {
	return html`<section id=${id} class=${wide ? 'section wide' : 'section'} aria-labelledby=${`${id}-h`}>
		<h2 id=${`${id}-h`}>${title}</h2>
		${children}
	</section>`;
}

function App() {
	const [notices, setNotices] = useState([]);
	const [tokenAsk, setTokenAsk] = useState(null); // null, or the reason shown
	const [epoch, setEpoch] = useState(0); // a new token restarts everything
	const [live, setLive] = useState('connecting');
	const [dialog, setDialog] = useState(null);
	const [now, setNow] = useState(Date.now());

	const dismiss = useCallback(id => setNotices(ns => ns.filter(n => n.id !== id)), []);
	// report shows an error until dismissed; a newer error of the same
	// context (a refresh failing again) replaces the older one.
	const report = useCallback((error, context) => {
		const id = ++noticeSeq;
		setNotices(ns => [...ns.filter(n => n.kind !== 'error' || n.context !== context).slice(-4), {id, kind: 'error', error, context}]);
	}, []);
	// tell shows text as a toast for a few seconds; a toast with the same key
	// (the same generation told by the call's answer and by its event)
	// replaces the earlier one. At most three are shown.
	const tell = useCallback((text, key) => {
		const id = ++noticeSeq;
		setNotices(ns => [...ns.filter(n => n.kind === 'error' || (n.id > id - 3 && (!key || n.key !== key))),
			{id, kind: 'info', text, key}]);
		setTimeout(() => dismiss(id), 8000);
	}, []);
	// locked: the API answered 401 to the token in use (or to none).
	const [locked, setLocked] = useState(false);
	const unauthorized = useCallback(() => {
		setLocked(true);
		setTokenAsk(token() ? 'The API refused the token: it is not the admin token of this server.'
			: 'The API answered 401: it needs the admin token.');
	}, []);

	const {data, refresh, more} = useDashboard({onUnauthorized: unauthorized, report});

	useEffect(() => {
		refresh('all');
		return streamEvents({
			onState: s => {
				setLive(s);
				if (s === 'live') {
					refresh('all'); // whatever happened while the stream was away
				} else if (s === 'unauthorized') {
					unauthorized();
				}
			},
			onEvent: (name, d) => {
				switch (name) {
				case 'generation_published':
					refresh('current', 'generations', 'canary', 'audit', 'gateways');
					tell(`Generation ${d.id} published: ${d.action} by ${d.author}${d.message ? `, “${d.message}”` : ''}.`, `generation-${d.id}`);
					break;
				case 'generation_applied':
					refresh('gateways');
					break;
				case 'canary_promoted':
				case 'canary_rolled_back':
					refresh('canary');
					tell(`${d.service}: ${d.actor || 'the canary controller'} ${name === 'canary_promoted' ? 'promoted' : 'rolled back'} the canary, ${d.from_weight} → ${d.to_weight}.`);
					break;
				}
			},
		});
	}, [epoch]);

	useEffect(() => {
		const id = setInterval(() => {
			setNow(Date.now());
			if (document.visibilityState === 'visible') {
				refresh('canary', 'gateways');
			}
		}, REFRESH_MS);
		return () => clearInterval(id);
	}, []);

	const mutate = useCallback(async call => {
		try {
			const g = await call();
			if (g && g.unchanged) {
				tell(`Nothing changed: generation ${g.id} already has that spec.`);
			} else if (g && g.id && g.action) {
				tell(`Generation ${g.id} published: ${g.action} by ${g.author}${g.message ? `, “${g.message}”` : ''}.`, `generation-${g.id}`);
			}
			refresh('all');
			return g;
		} catch (e) {
			if (e.status === 401) {
				unauthorized();
			}
			throw e;
		}
	}, []);

	const saveToken = value => {
		setToken(value);
		setLocked(false);
		setTokenAsk(null);
		setEpoch(e => e + 1);
	};

	const current = data.current;
	return html`
		<header class="top">
			<div class="brand"><span class="logo" aria-hidden="true">⇄</span> Dwara</div>
			<div class="active-gen">${current
				? html`Generation <strong data-active-generation=${current.id}>${current.id}</strong>: ${current.action} by ${current.author}, <${Time} iso=${current.created_at}/>`
				: current === null ? 'No generation yet' : 'Loading…'}</div>
			<div class=${`live live-${live}`} role="status" aria-live="polite"><span class="dot" aria-hidden="true"></span>${LIVE_TEXT[live]}</div>
			<nav aria-label="Sections and links">
				<a href="#services">Services</a>
				<a href="#canary">Canary</a>
				<a href="#history">History</a>
				<a href="#gateways">Gateways</a>
				<a href="#audit">Audit</a>
				<a href="/docs">API docs</a>
				<button type="button" data-action="token" onClick=${() => setTokenAsk('')}>${token() ? 'Token ✓' : 'Token'}</button>
			</nav>
		</header>
		<main>
			${locked && tokenAsk === null && html`<div class="notice notice-error" role="alert">
				<p><strong>The API needs the admin token.</strong></p>
				<button type="button" class="primary" onClick=${() => setTokenAsk('')}>Enter the token</button>
			</div>`}
			<${Notices} notices=${notices} dismiss=${dismiss}/>
			<div class="layout">
				<div class="col-main">
					<${Section} id="services" title="Services">
						<${Services} current=${current} canary=${data.canary} gateways=${liveGateways(data.gateways)} ask=${setDialog} mutate=${mutate}/>
					</${Section}>
				</div>
				<div class="col-side">
					<${Section} id="history" title="History">
						<${History} generations=${data.generations} current=${current} gateways=${liveGateways(data.gateways)}
							ask=${setDialog} mutate=${mutate} more=${more} report=${report}/>
					</${Section}>
				</div>
			</div>
			<${Section} id="canary" title="Canary groups" wide>
				<${Canary} canary=${data.canary} current=${current} now=${now} ask=${setDialog} mutate=${mutate} refresh=${refresh}/>
			</${Section}>
			<${Section} id="gateways" title="Gateways" wide>
				<${Gateways} gateways=${data.gateways} current=${current} now=${now}/>
			</${Section}>
			<${Section} id="audit" title="Audit log" wide>
				<${Audit} audit=${data.audit} more=${more} report=${report}/>
			</${Section}>
		</main>
		${dialog && html`<${ConfirmDialog} key=${dialog.title} req=${dialog} onClose=${() => setDialog(null)}/>`}
		${tokenAsk !== null && html`<${TokenDialog} reason=${tokenAsk} onSave=${saveToken} onClose=${() => setTokenAsk(null)}/>`}
	`;
}

const root = document.getElementById('app');
root.textContent = '';
render(html`<${App}/>`, root);
