package proxy

// BufferPool is the copy-buffer pool of the answers and tunnels. It
// is a channel of buffers rather than a sync.Pool so that returning a buffer
// does not allocate an interface box.
type BufferPool struct{ free chan []byte }

// copyBufferSize is as large as an endpoint connection's read buffer, so that
// a copy moves what one read of it holds.
const copyBufferSize = ConnBufferSize

func newBufferPool(n int) *BufferPool { return &BufferPool{free: make(chan []byte, n)} }

// Get returns a copy buffer, from the pool when it has one.
func (p *BufferPool) Get() []byte {
	select {
	case b := <-p.free:
		return b
	default:
		return make([]byte, copyBufferSize)
	}
}

// Put gives b back to the pool, or drops it when the pool is full.
func (p *BufferPool) Put(b []byte) {
	if cap(b) != copyBufferSize {
		return
	}
	select {
	case p.free <- b[:copyBufferSize]:
	default:
	}
}
