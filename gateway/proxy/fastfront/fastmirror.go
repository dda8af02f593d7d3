package fastfront

import (
	"github.com/dwara/dwara/gateway/proxy"
	"github.com/valyala/fasthttp"
)

// mirrorFast is mirrorHTTP for the fasthttp front: a body fasthttp holds
// whole already is copied, one it streams is read as forward reads it.
func (p server) mirrorFast(ctx *fasthttp.RequestCtx, x *fastExchange, rt proxy.Route) *proxy.MirrorBuf {
	q := &x.req
	ep, mb := p.MirrorTarget(q, rt)
	if ep == nil {
		return nil
	}
	if mb != nil {
		if ctx.RequestBodyStream() == nil {
			mb.CopyWhole(ctx.Request.Body())
		} else {
			x.tapped = true
			rest, ok := mb.Fill(x.requestBody(ctx))
			ctx.Request.SetBodyStream(rest, int(q.Length))
			if !ok {
				return nil
			}
		}
	}
	return p.QueueMirror(q, rt, ep, mb)
}
