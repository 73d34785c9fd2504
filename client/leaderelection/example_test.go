package leaderelection_test

import (
	"context"
	"errors"
	"log"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/leaderelection"
)

// A controller that runs only while it leads, hands over at once on
// SIGTERM, and campaigns again after losing the lease.
func ExampleElector() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg, err := client.Default()
	if err != nil {
		log.Fatal(err)
	}
	rc, err := client.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	el, err := leaderelection.New(rc, leaderelection.Config{
		Namespace: "kube-system", Name: "my-controller",
		ReleaseOnCancel: true,
		Metrics:         prometheus.DefaultRegisterer,
		Callbacks: leaderelection.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				<-ctx.Done() // run the controller until ctx is done
			},
			OnNewLeader: func(id string) { log.Printf("leader: %s", id) },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	for {
		err := el.Run(ctx)
		if !errors.Is(err, leaderelection.ErrLost) {
			if err != nil {
				log.Print(err)
			}
			return
		}
		log.Printf("%v; campaigning again", err)
	}
}
