package control

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// filled sets every field of v (a pointer) that JSON carries to a value
// other than its zero, so an answer holds every key the daemon can write.
func filled(t *testing.T, v reflect.Value, n int) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		filled(t, v.Elem(), n)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 29, 10, 54, n, 123456789, time.FixedZone("", 2*3600))))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).Tag.Get("json") == "-" {
				continue
			}
			filled(t, v.Field(i), n+i)
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			filled(t, s.Index(i), n+i)
		}
		v.Set(s)
	case reflect.String:
		v.SetString(strings.Repeat("é\"\\\n\t\u2028<&> 𝄞 x", n%3+1))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(n + 1))
	case reflect.Float64:
		v.SetFloat(float64(n) + 0.25)
	case reflect.Bool:
		v.SetBool(true)
	default:
		t.Fatalf("a field of kind %s: decodeRecall and this test need it", v.Kind())
	}
}

// TestDecodeRecall: every key the daemon writes is read as encoding/json
// reads it, indented (as the daemon writes) or not.
func TestDecodeRecall(t *testing.T) {
	var full RecallResponse
	filled(t, reflect.ValueOf(&full), 1)
	for _, indent := range []bool{true, false} {
		var b []byte
		if indent {
			b, _ = json.MarshalIndent(full, "", "  ")
		} else {
			b, _ = json.Marshal(full)
		}
		var got RecallResponse
		if err := decodeRecall(b, &got); err != nil {
			t.Fatalf("decodeRecall of a full answer: %v\n%s", err, b)
		}
		var want RecallResponse
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v\nwant %+v", got, want)
		}
	}
}

// TestDecodeRecallRefuses: what decodeRecall does not read the same way
// is an error (the client then reads it with encoding/json), and what it
// reads is encoding/json's.
func TestDecodeRecallRefuses(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{}`, true},
		{` null `, true},
		{`{"results":[]}`, true},
		{`{"results":null,"stats":null}`, true},
		{`{"results":[null,{"text":"a\ud83d\ude00b\ud800c\u00e9\/"}]}`, true},
		{"{\"results\":[{\"text\":\"\xff\xfe\xe2\x82\"}]}", true},
		{`{"results":[{"time":"2026-11-29T10:54:00Z","score":-1.5e-3,"folded":[]}]}`, true},
		{`{"roots":1,"roots":2}`, false},
		{`{"Roots":1}`, false},
		{`{"unknown":1}`, false},
		{`{"roots":1.5}`, false},
		{`{"roots":01}`, false},
		{`{"roots":-}`, false},
		{`{"roots":99999999999999999999}`, false},
		{`{"searched":null}`, false},
		{`{"results":[{"text":"a` + "\x01" + `"}]}`, false},
		{`{"results":[{"text":"\x"}]}`, false},
		{`{"results":[{"text":"\u12"}]}`, false},
		{`{"results":[{"time":"yesterday"}]}`, false},
		{`{"results":[],}`, false},
		{`{"results":[1]}`, false},
		{`{} {}`, false},
		{`{"stats":{"Files":1,"StoppedEarly":tru}}`, false},
		{``, false},
	} {
		var got RecallResponse
		err := decodeRecall([]byte(tc.in), &got)
		if (err == nil) != tc.ok {
			t.Errorf("decodeRecall(%q): error %v, want ok %v", tc.in, err, tc.ok)
			continue
		}
		if err == nil {
			var want RecallResponse
			if err := json.Unmarshal([]byte(tc.in), &want); err != nil {
				t.Errorf("decodeRecall read %q, which encoding/json refuses: %v", tc.in, err)
			} else if !reflect.DeepEqual(got, want) {
				t.Errorf("decodeRecall(%q) = %+v, want %+v", tc.in, got, want)
			}
		}
	}
}

// FuzzDecodeRecall: where decodeRecall reads an answer, encoding/json
// reads the same.
func FuzzDecodeRecall(f *testing.F) {
	var full RecallResponse
	filled(&testing.T{}, reflect.ValueOf(&full), 1)
	b, _ := json.MarshalIndent(full, "", "  ")
	f.Add(b)
	f.Add([]byte(`{"results":[{"text":"\ud800\udc00\udc00\u0041","line_number":-0,"score":1E+2}],"stats":{"Duration":5}}`))
	f.Add([]byte(`{"results":[{"before":[{"line":1,"time":null}],"after":null}],"next":3}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var got RecallResponse
		if decodeRecall(in, &got) != nil {
			return
		}
		var want RecallResponse
		if err := json.Unmarshal(in, &want); err != nil {
			t.Fatalf("decodeRecall read %q, which encoding/json refuses: %v", in, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeRecall(%q) = %+v, want %+v", in, got, want)
		}
	})
}
