package proxy_test

import (
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/gateway/proxy/fastfront"
	"github.com/dwara/dwara/gateway/proxy/front"
	"github.com/dwara/dwara/gateway/proxy/httpfront"
)

// init gives the tests of package proxy the fronts (export_test.go): an
// external test package may import the front packages, which import
// proxy, and is linked into the same test binary.
func init() {
	proxy.NewFastServerHook = fastfront.NewServer
	proxy.FastListenerHook = fastfront.Listener
	proxy.HTTPHandlerHook = httpfront.Handler
	proxy.HeadCheckListenerHook = httpfront.HeadCheckListener
	proxy.NewFrontHook = func(p *proxy.Proxy, c proxy.FrontConfig) (proxy.Front, error) {
		return front.New(p, front.Config(c))
	}
	proxy.FastAnswerHook = func(h *fasthttp.ResponseHeader) proxy.AnswerSink { return fastfront.AnswerSink(h) }
	proxy.StdAnswerHook = func(w http.ResponseWriter) proxy.AnswerSink { return httpfront.AnswerSink(w) }
	proxy.MaxHeadBytes = httpfront.MaxHeadBytes
	proxy.FastClientCheckInterval = fastfront.ClientCheckInterval
	proxy.ErrUnknownFront = front.ErrUnknown
	proxy.ErrLoopRemoved = front.ErrLoopRemoved
}
