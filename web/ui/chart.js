// The timeline of a canary group's weight: an SVG step line from the
// generation's start to now, with the controller's promotions and rollbacks
// and the operators' holds marked. Plain SVG, so it scales with the page,
// needs no inline style and can be read by assistive technology (every
// marker has a title, the figure a caption).
import {html} from './vendor/htm-preact-standalone.module.js';

const W = 640;
const H = 190;
const PAD = {left: 44, right: 14, top: 14, bottom: 30};

// MIN_SPAN_MS keeps a young generation's timeline from being a dot.
const MIN_SPAN_MS = 15 * 1000;

// clock formats a time of the timeline's axis in UTC, as every time of
// the dashboard: "07:35:50".
export function clock(ms) {
	return new Date(ms).toISOString().slice(11, 19);
}

function kind(action) {
	switch (action) {
	case 'promote':
		return 'promote';
	case 'rollback':
	case 'severe_rollback':
		return 'rollback';
	default:
		return 'hold';
	}
}

// marker draws one event at (x, y): a triangle up for a promotion, down for
// a rollback, a square for a wait (a hold, a gate, a pause or resume), so
// that the shape says what the colour says.
function marker(e, x, y) {
	const k = kind(e.action);
	let d;
	if (k === 'promote') {
		d = `M${x},${y - 7}L${x + 7},${y + 5}L${x - 7},${y + 5}Z`;
	} else if (k === 'rollback') {
		d = `M${x},${y + 7}L${x + 7},${y - 5}L${x - 7},${y - 5}Z`;
	} else {
		d = `M${x - 5},${y - 5}h10v10h-10Z`;
	}
	const label = `${clock(Date.parse(e.created_at))} ${e.action.replace('_', ' ')} ${e.from_weight} → ${e.to_weight}` +
		(e.reason ? `: ${e.reason}` : '');
	return html`<path class=${`mk mk-${k}`} d=${d} data-event-action=${e.action}><title>${label}</title></path>`;
}

// CanaryChart draws group's canary weight over generation since (an ISO
// time) until now (ms), from events (newest first, as the API lists them).
export function CanaryChart({group, events, since, now}) {
	const total = group.configured[0] + group.configured[1];
	const evs = [...events].reverse();
	let t0 = Date.parse(since);
	if (Number.isNaN(t0)) {
		t0 = evs.length ? Date.parse(evs[0].created_at) : now;
	}
	let t1 = Math.max(now, ...evs.map(e => Date.parse(e.created_at)));
	if (t1 - t0 < MIN_SPAN_MS) {
		t1 = t0 + MIN_SPAN_MS;
	}
	const x = t => PAD.left + (Math.min(Math.max(t, t0), t1) - t0) / (t1 - t0) * (W - PAD.left - PAD.right);
	const y = w => PAD.top + (1 - w / (total || 1)) * (H - PAD.top - PAD.bottom);

	let w = group.configured[1];
	let d = `M${x(t0).toFixed(1)},${y(w).toFixed(1)}`;
	for (const e of evs) {
		const xe = x(Date.parse(e.created_at)).toFixed(1);
		d += `H${xe}V${y(e.from_weight).toFixed(1)}V${y(e.to_weight).toFixed(1)}`;
		w = e.to_weight;
	}
	d += `H${x(t1).toFixed(1)}`;

	const ticks = [0, total / 2, total];
	const summary = evs.length
		? `${group.service}: canary weight ${group.configured[1]} at the start of generation ${group.generation_id}, ` +
			`${evs.length} event${evs.length === 1 ? '' : 's'} since, ${w} of ${total} now`
		: `${group.service}: canary weight ${w} of ${total} since generation ${group.generation_id} started; no event yet`;
	const titleId = `chart-${group.service}`;
	return html`<figure class="chart">
		<svg viewBox="0 0 ${W} ${H}" role="img" aria-labelledby=${titleId} focusable="false">
			<title id=${titleId}>${summary}</title>
			${ticks.map(v => html`
				<line class="grid" x1=${PAD.left} x2=${W - PAD.right} y1=${y(v)} y2=${y(v)}></line>
				<text class="axis" x=${PAD.left - 6} y=${y(v) + 4} text-anchor="end">${Math.round(v)}</text>`)}
			<text class="axis" x=${PAD.left} y=${H - 8} text-anchor="start">${clock(t0)}</text>
			<text class="axis" x=${W - PAD.right} y=${H - 8} text-anchor="end">${clock(t1)}</text>
			<path class="step" d=${d}></path>
			${evs.map(e => marker(e, x(Date.parse(e.created_at)), y(e.to_weight)))}
		</svg>
		<figcaption>
			Canary weight (${group.canary}) out of ${total}, this generation.
			<span class="key"><svg viewBox="-8 -8 16 16" class="key-mark" aria-hidden="true"><path class="mk mk-promote" d="M0,-7L7,5L-7,5Z"></path></svg> promotion</span>
			<span class="key"><svg viewBox="-8 -8 16 16" class="key-mark" aria-hidden="true"><path class="mk mk-rollback" d="M0,7L7,-5L-7,-5Z"></path></svg> rollback</span>
			<span class="key"><svg viewBox="-8 -8 16 16" class="key-mark" aria-hidden="true"><path class="mk mk-hold" d="M-5,-5h10v10h-10Z"></path></svg> a wait (hold, gate, pause, resume)</span>
		</figcaption>
	</figure>`;
}
