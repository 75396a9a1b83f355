package transport

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// A sharedStart is one client's RoundStart, already in wire form as a
// ServerMessage: its own fields (position, partner, ...) in head, and the
// part every client of the round receives alike (the global model, the
// ranges, a secure round's settings) encoded once per round in shared.
// gRPC's proto codec would marshal the whole message once per client into
// a buffer of its 1 MiB tier: 1,000 clients' starts held 0.6 GB of a
// server's memory (MLP, 103 KB of weights).
//
// The two parts are one valid encoding because protobuf parses a message
// whose fields arrive in any order, the fields of head and shared being
// disjoint.
type sharedStart struct {
	head   []byte // the ServerMessage's tag, the RoundStart's length and the client's own fields
	shared []byte
}

// roundStartField is the number of ServerMessage's round_start.
var roundStartField = (&pb.ServerMessage{}).ProtoReflect().Descriptor().Fields().ByName("round_start").Number()

// encodeShared encodes the fields of a RoundStart every client receives alike.
func encodeShared(common *pb.RoundStart) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(common)
}

// newSharedStart wraps the client's own fields of a RoundStart around
// shared, the output of encodeShared.
func newSharedStart(own *pb.RoundStart, shared []byte) *sharedStart {
	n := proto.Size(own)
	head := protowire.AppendTag(make([]byte, 0, n+16), roundStartField, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(n+len(shared)))
	head, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(head, own)
	if err != nil { // only invalid UTF-8 or a missing required field fail, and own has neither
		panic(err)
	}
	return &sharedStart{head: head, shared: shared}
}

// An encoded is a ServerMessage already in wire form, of the kind named
// (its body's field): a message the server queues for every client of a
// step at once, each client's delivery (inboxMessage), smaller encoded
// than as structs, or the unmask request, the same for every survivor and
// encoded once.
type encoded struct {
	b    []byte
	kind string
}

// messageCodec is gRPC's proto codec with three changes, for memory: it
// sends an encoded as it is; it sends a sharedStart from its parts, the
// shared part written to every client from one buffer (which gRPC never
// frees: mem.SliceBuffer); and a message over pooledBytes is encoded into,
// and decoded from, a buffer of its own size. gRPC's codec takes such
// buffers from its pool's 1 MiB tier: a fleet of 1,000 secure clients
// receiving their round starts of 71 KB (10,000 clients' ids and a linear
// model) held 1,000 of them, a gigabyte against its GOMEMLIMIT, and the
// fleet's garbage collector thrashed.
type messageCodec struct{ encoding.CodecV2 }

// pooledBytes is the largest message whose buffer comes from gRPC's pool:
// the top of its tiers below 1 MiB.
const pooledBytes = 32 << 10

func newMessageCodec() messageCodec {
	return messageCodec{encoding.GetCodecV2("proto")}
}

func (c messageCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *sharedStart:
		return mem.BufferSlice{mem.SliceBuffer(m.head), mem.SliceBuffer(m.shared)}, nil
	case *encoded:
		return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
	case proto.Message:
		if proto.Size(m) > pooledBytes {
			b, err := proto.MarshalOptions{UseCachedSize: true}.Marshal(m)
			return mem.BufferSlice{mem.SliceBuffer(b)}, err
		}
	}
	return c.CodecV2.Marshal(v)
}

func (c messageCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok || data.Len() <= pooledBytes {
		return c.CodecV2.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return proto.Unmarshal(data[0].ReadOnlyData(), m)
	}
	return proto.Unmarshal(data.Materialize(), m)
}
