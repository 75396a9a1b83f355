package transport

import (
	"maps"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/secagg"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// TestSharedStart checks that a round start sent in two parts is the
// message the client would have received whole, for the fields a client
// has of its own and those every client shares.
func TestSharedStart(t *testing.T) {
	common := &pb.RoundStart{
		Global: [][]byte{{1, 2, 3, 4}, make([]byte, 4000)},
		Ranges: []*pb.Range{{Center: 0.5, Radius: 2}, {Radius: 0.25}},
		Secagg: &pb.SecAgg{Bits: 24, Degree: 96, Threshold: 64, Seed: []byte("seed"), Clients: []uint32{0, 3, 7}},
	}
	shared, err := encodeShared(common)
	if err != nil {
		t.Fatal(err)
	}
	for _, own := range []*pb.RoundStart{
		{Round: 1, Partner: -1, TimeLeftMilli: 59_000},
		{Round: 7, Position: 3, Partner: 12, PartnerIdentity: []byte("identity"), SharedKey: []byte("key"), GroupIndex: 1, GroupSize: 4},
	} {
		codec := newMessageCodec()
		data, err := codec.Marshal(newSharedStart(own, shared))
		if err != nil {
			t.Fatal(err)
		}
		var got pb.ServerMessage
		if err := codec.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		want := proto.Clone(own).(*pb.RoundStart)
		want.Global, want.Ranges, want.Secagg = common.Global, common.Ranges, common.Secagg
		if !proto.Equal(got.GetRoundStart(), want) {
			t.Fatalf("received %v, want %v", got.GetRoundStart(), want)
		}
		if kindOf(newSharedStart(own, shared)) != "round_start" {
			t.Fatal("a shared start is not counted as a round_start")
		}
	}
}

// TestLargeMessages: a message over pooledBytes goes through the codec in
// a buffer of its own size, whole or received in pieces.
func TestLargeMessages(t *testing.T) {
	codec := newMessageCodec()
	for _, n := range []int{pooledBytes / 2, 3 * pooledBytes} {
		want := &pb.ServerMessage{Body: &pb.ServerMessage_RoundStart{RoundStart: &pb.RoundStart{Round: 2, Global: [][]byte{make([]byte, n)}}}}
		want.GetRoundStart().Global[0][n-1] = 7
		data, err := codec.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if big := data.Len() > pooledBytes; big && (len(data) != 1 || cap(data[0].ReadOnlyData()) != data.Len()) {
			t.Errorf("%d bytes encoded into %d buffers, the first of capacity %d", data.Len(), len(data), cap(data[0].ReadOnlyData()))
		}
		b := data.Materialize()
		for _, pieces := range []mem.BufferSlice{{mem.SliceBuffer(b)}, {mem.SliceBuffer(b[:10]), mem.SliceBuffer(b[10:])}} {
			var got pb.ServerMessage
			if err := codec.Unmarshal(pieces, &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, want) {
				t.Fatalf("%d bytes in %d pieces: decoded another message", n, len(pieces))
			}
		}
	}
}

// TestInboxMessage checks that a delivery encoded by inboxMessage is, byte
// for byte, the message proto.Marshal makes of it, and is sent as it is:
// with dealer 0 and holder 0 (fields proto3 leaves out), a missing
// signature, round 0, an empty delivery and a large one.
func TestInboxMessage(t *testing.T) {
	bytes := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i)
		}
		return b
	}
	large := map[uint64]secagg.Delivery{}
	for from := range uint64(300) {
		large[from*7] = secagg.Delivery{Values: bytes(64, byte(from)), Sealed: bytes(96, byte(from+1))}
	}
	for _, c := range []struct {
		t, to uint32
		in    map[uint64]secagg.Delivery
		sigs  map[uint32][]byte
	}{
		{1, 5, map[uint64]secagg.Delivery{0: {Values: bytes(64, 1), Sealed: bytes(96, 2)}, 9: {Values: bytes(64, 3), Sealed: bytes(96, 4)}},
			map[uint32][]byte{0: bytes(64, 5), 9: bytes(64, 6)}},
		{300, 0, map[uint64]secagg.Delivery{4: {Values: bytes(64, 1), Sealed: bytes(96, 2)}, 1 << 20: {Sealed: bytes(96, 4)}},
			map[uint32][]byte{4: bytes(64, 5)}},
		{0, 2, map[uint64]secagg.Delivery{}, nil},
		{1, 3, large, map[uint32][]byte{7: bytes(64, 9), 14: bytes(64, 10)}},
	} {
		m := &pb.SecAggShares{Round: c.t}
		for _, from := range slices.Sorted(maps.Keys(c.in)) {
			m.Shares = append(m.Shares, &pb.SecAggShare{From: uint32(from), To: c.to, Ciphertext: c.in[from].Sealed,
				Values: c.in[from].Values, Signature: c.sigs[uint32(from)]})
		}
		want, err := proto.Marshal(&pb.ServerMessage{Body: &pb.ServerMessage_SecaggInbox{SecaggInbox: m}})
		if err != nil {
			t.Fatal(err)
		}
		e := inboxMessage(c.t, c.to, c.in, c.sigs)
		if !slices.Equal(e.b, want) || cap(e.b) != len(e.b) {
			t.Errorf("round %d, holder %d: %d bytes (capacity %d), proto.Marshal %d", c.t, c.to, len(e.b), cap(e.b), len(want))
		}
		if kindOf(e) != kind(&pb.ServerMessage{Body: &pb.ServerMessage_SecaggInbox{}}) {
			t.Errorf("kind %q", kindOf(e))
		}
		data, err := newMessageCodec().Marshal(e)
		if err != nil || !slices.Equal(data.Materialize(), want) {
			t.Errorf("the codec sends %d bytes (%v), want %d", data.Len(), err, len(want))
		}
	}
}
