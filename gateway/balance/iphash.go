package balance

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/dwara/dwara/gateway/split"
)

// ringPointsPerEndpoint is the number of virtual points each endpoint places
// on the ip_hash ring, as in ketama.
const ringPointsPerEndpoint = 160

// ring is the ip_hash balancer: a ketama-style consistent-hash ring.
//
// Each endpoint places 160 points on a 64-bit circle at ringHash("addr#i")
// for i in 0..159; the points of all endpoints are sorted once, when the
// balancer is built. A request's key is hashed with the same function and
// served by the owner of the first point at or after the hash, wrapping
// around at the top. Because an endpoint's points depend only on its own
// address, adding or removing an endpoint moves only the keys that land on
// its arcs; every other key keeps its endpoint. When the owner of a key's
// point is down, the lookup walks clockwise to the next point owned by an up
// endpoint, which is exactly where the key would go if the down endpoint were
// removed from the ring, and the key comes back when the endpoint does.
//
// With 160 points an endpoint's share of the ring varies by about 8% of the
// mean (the spread of a sum of 160 random arcs); that is the price of the
// consistent-hashing property, and the reason for the many points.
type ring struct {
	hashes []uint64 // sorted ascending
	owners []int32  // owners[i] is the endpoint index of hashes[i]
	states []*State
}

func newRing(addrs []string, states []*State) *ring {
	type point struct {
		hash  uint64
		owner int
	}
	points := make([]point, 0, len(addrs)*ringPointsPerEndpoint)
	var buf []byte
	for owner, addr := range addrs {
		for i := range ringPointsPerEndpoint {
			buf = append(buf[:0], addr...)
			buf = append(buf, '#')
			buf = strconv.AppendInt(buf, int64(i), 10)
			points = append(points, point{hash: ringHash(buf), owner: owner})
		}
	}
	// Break the (unlikely) tie of two equal hashes by address, not by index,
	// so the ring does not depend on the order of the endpoints in the spec.
	slices.SortFunc(points, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(addrs[a.owner], addrs[b.owner]))
	})
	r := &ring{
		hashes: make([]uint64, len(points)),
		owners: make([]int32, len(points)),
		states: states,
	}
	for i, p := range points {
		r.hashes[i] = p.hash
		r.owners[i] = int32(p.owner)
	}
	return r
}

// Pick implements Balancer: the endpoint owning key on the ring, skipping
// endpoints that are down.
//
// From the key's point the lookup walks clockwise until it meets a point
// whose endpoint is up, for at most one full turn of the ring, and returns
// -1 when the turn meets none. The walk is bounded by the number of points,
// not by a check made before it, so endpoints that go down while the walk
// runs cannot make it spin. The ring never changes with health: a key whose
// endpoint is down goes where it would go if that endpoint were removed,
// every other key stays, and the key comes back with the endpoint.
func (r *ring) Pick(key string) int {
	i := r.search(ringHash(key))
	if owner := int(r.owners[i]); r.states[owner].Up() {
		return owner
	}
	// Every endpoint down is the one case that walks a whole turn; one load
	// per endpoint settles it first.
	if !r.anyUp() {
		return -1
	}
	for range len(r.hashes) - 1 {
		if i++; i == len(r.hashes) {
			i = 0
		}
		if owner := int(r.owners[i]); r.states[owner].Up() {
			return owner
		}
	}
	return -1
}

// search returns the index of the first point at or after h, wrapping to 0
// past the last point.
func (r *ring) search(h uint64) int {
	lo, hi := 0, len(r.hashes)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if r.hashes[mid] < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(r.hashes) {
		return 0
	}
	return lo
}

func (r *ring) anyUp() bool {
	for _, s := range r.states {
		if s.Up() {
			return true
		}
	}
	return false
}

// ringHash hashes a key or a point name onto the ring: FNV-1a 64 over the
// bytes (split.Hash, the hash of the weighted pick), followed by the 64-bit
// finaliser of MurmurHash3 (fmix64).
//
// The finaliser matters for a ring, which orders hashes by their high bits.
// FNV-1a's last step multiplies by a prime of 2^40 + 2^8 + 0xb3, so keys that
// differ only in their last byte, such as neighbouring client addresses
// "10.0.0.7" and "10.0.0.8", differ only from bit 40 upwards by a small
// multiple, and would land within 1/65536 of the ring of each other, on the
// same endpoint. fmix64 spreads every input bit over the whole word.
// Unlike md5 (the original ketama point function) it costs a few
// nanoseconds and nothing on the heap.
func ringHash[T string | []byte](b T) uint64 {
	h := split.Hash(string(b)) // a []byte is only hashed while building the ring
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
