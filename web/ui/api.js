// The dashboard's client of Dwara's REST API (openapi/openapi.yaml), same
// origin only: JSON calls with the operator's bearer token, problem+json
// errors as ApiError, and the server-sent events of GET /api/v1/events read
// with fetch streaming (EventSource cannot send an Authorization header).

// TOKEN_KEY is where the admin token is kept: sessionStorage, so it lives as
// long as the tab and is never written to disk by the page.
const TOKEN_KEY = 'dwara.token';

// ACTOR names the dashboard in X-Dwara-Actor: the author of the generations
// it publishes and the actor of its audit entries.
export const ACTOR = 'dashboard';

export function token() {
	try {
		return sessionStorage.getItem(TOKEN_KEY) || '';
	} catch {
		return '';
	}
}

export function setToken(value) {
	try {
		if (value) {
			sessionStorage.setItem(TOKEN_KEY, value);
		} else {
			sessionStorage.removeItem(TOKEN_KEY);
		}
	} catch {
		// Storage refused (private mode): the token is then not kept.
	}
}

// ApiError is a refused or failed call. problem is the RFC 9457 body the API
// sent (type, title, status, detail, errors[{path, message}], request_id), or
// one made up for an answer without one; status 0 means no answer at all.
export class ApiError extends Error {
	constructor(status, problem) {
		super(problem.detail || problem.title || `HTTP ${status}`);
		this.name = 'ApiError';
		this.status = status;
		this.problem = problem;
	}
}

function authHeaders(headers) {
	const t = token();
	if (t) {
		headers.Authorization = `Bearer ${t}`;
	}
	return headers;
}

// api calls method path and returns the decoded JSON answer. A call other
// than GET sends body (default {}) as application/json, names the dashboard
// as the actor, and sends If-Match: "<ifMatch>" when ifMatch is set. Any
// answer other than 2xx throws an ApiError.
export async function api(method, path, {body, ifMatch, signal} = {}) {
	const headers = authHeaders({Accept: 'application/json, application/problem+json'});
	const init = {method, headers, cache: 'no-store', credentials: 'same-origin', redirect: 'error', signal};
	if (method !== 'GET' && method !== 'HEAD') {
		headers['Content-Type'] = 'application/json';
		headers['X-Dwara-Actor'] = ACTOR;
		if (ifMatch !== undefined && ifMatch !== null) {
			headers['If-Match'] = `"${ifMatch}"`;
		}
		init.body = JSON.stringify(body ?? {});
	}
	let resp;
	try {
		resp = await fetch(path, init);
	} catch (err) {
		if (err.name === 'AbortError') {
			throw err;
		}
		throw new ApiError(0, {title: 'The server did not answer', detail: `${method} ${path}: ${err.message || err}`});
	}
	const text = await resp.text();
	let data = null;
	if (text) {
		try {
			data = JSON.parse(text);
		} catch {
			data = null;
		}
	}
	if (!resp.ok) {
		const problem = data && typeof data === 'object' ? data
			: {title: resp.statusText || `HTTP ${resp.status}`, detail: text.slice(0, 300)};
		problem.status = problem.status || resp.status;
		throw new ApiError(resp.status, problem);
	}
	return data;
}

// The event names of GET /api/v1/events.
export const EVENTS = ['generation_published', 'generation_applied', 'canary_promoted', 'canary_rolled_back'];

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// streamEvents follows GET /api/v1/events until the returned function is
// called. It reads the stream with fetch, so that the bearer token can be
// sent, and reconnects after a failure (1 s, doubling up to 15 s).
// onState receives 'connecting', 'live' (the server said ": connected"),
// 'reconnecting' or 'unauthorized' (401: it stops until started again);
// onEvent receives each event's name and decoded data.
export function streamEvents({onEvent, onState}) {
	let stopped = false;
	let ctrl = null;
	let delay = 1000;

	function dispatch(name, lines) {
		if (!name || !EVENTS.includes(name)) {
			return;
		}
		let data = null;
		try {
			data = JSON.parse(lines.join('\n'));
		} catch {
			return;
		}
		onEvent(name, data);
	}

	async function once() {
		ctrl = new AbortController();
		const resp = await fetch('/api/v1/events', {
			headers: authHeaders({Accept: 'text/event-stream'}),
			cache: 'no-store', credentials: 'same-origin', signal: ctrl.signal,
		});
		if (resp.status === 401) {
			return 'unauthorized';
		}
		if (!resp.ok || !resp.body) {
			throw new Error(`HTTP ${resp.status}`);
		}
		const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
		let buf = '';
		let name = '';
		let data = [];
		for (;;) {
			const {value, done} = await reader.read();
			if (done) {
				return 'ended';
			}
			buf += value;
			let nl;
			while ((nl = buf.indexOf('\n')) >= 0) {
				let line = buf.slice(0, nl);
				buf = buf.slice(nl + 1);
				if (line.endsWith('\r')) {
					line = line.slice(0, -1);
				}
				if (line === '') {
					dispatch(name, data);
					name = '';
					data = [];
				} else if (line.startsWith(':')) {
					if (line === ': connected') {
						delay = 1000;
						onState('live');
					}
				} else {
					const colon = line.indexOf(':');
					const field = colon < 0 ? line : line.slice(0, colon);
					let val = colon < 0 ? '' : line.slice(colon + 1);
					if (val.startsWith(' ')) {
						val = val.slice(1);
					}
					if (field === 'event') {
						name = val;
					} else if (field === 'data') {
						data.push(val);
					}
				}
			}
		}
	}

	(async () => {
		onState('connecting');
		while (!stopped) {
			let outcome = 'failed';
			try {
				outcome = await once();
			} catch {
				// Refused, cut or aborted: reconnect below unless stopped.
			}
			if (stopped) {
				return;
			}
			if (outcome === 'unauthorized') {
				onState('unauthorized');
				return;
			}
			onState('reconnecting');
			await sleep(delay);
			delay = Math.min(delay * 2, 15000);
		}
	})();

	return () => {
		stopped = true;
		if (ctrl) {
			ctrl.abort();
		}
	};
}
