package transport

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

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
