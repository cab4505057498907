package ratelimitotel_test

import (
	"context"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimitkit/ratelimit"
	ratelimitotel "github.com/ratelimitkit/ratelimit/metrics/otel"
	"github.com/ratelimitkit/ratelimit/store"
)

// The Observer's instruments come from the Meter the program passes in;
// here a MeterProvider read by hand, in a program one with an exporter.
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	obs, err := ratelimitotel.New(provider.Meter("github.com/ratelimitkit/ratelimit"))
	if err != nil {
		panic(err)
	}
	defer obs.Close()
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("2/m", ratelimit.Named("jobs")),
		ratelimit.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	for range 3 { // 2 allowed, 1 denied
		lim.Allow(context.Background(), "tenant:42")
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "ratelimit.decisions" {
			continue
		}
		var lines []string
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			lines = append(lines, fmt.Sprintf("%s {%s} %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
		}
		slices.Sort(lines)
		for _, l := range lines {
			fmt.Println(l)
		}
	}
	// Output:
	// ratelimit.decisions {fallback=false,outcome=allowed,policy=jobs} 2
	// ratelimit.decisions {fallback=false,outcome=denied,policy=jobs} 1
}
