package extern_test

import (
	"context"
	"fmt"

	"github.com/fedpq/fedpq/extern"
	"github.com/fedpq/fedpq/extern/externtest"
	"github.com/fedpq/fedpq/model"
)

// A pool of trainer processes describes its model, and trains a client
// from given weights on given examples. Here the trainer is the tests'
// fake (a linear classifier); a real one is, say,
// "/usr/bin/python3 python/examples/mnist_cnn2.py".
func ExampleNewPool() {
	pool, err := extern.NewPool(extern.Options{Command: externtest.Command("")}, extern.Spec{
		Seed: 1, Input: []int{2, 2, 1}, Classes: 2, Optimizer: model.Optimizer{Name: "sgd", LR: 0.1},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	fmt.Println("tensors:", pool.Tensors())
	tr, _ := pool.Trainer()
	x := []float32{0, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0} // 3 examples of 2x2x1
	y := []int32{0, 1, 1}
	w, loss, err := tr.Train(context.Background(), pool.Init(1), x, y, []int{0, 2},
		model.TrainConfig{Epochs: 1, Batch: 2, Seed: 1007, Client: 5, Round: 1})
	fmt.Println("trained:", w[1], loss, err)
	acc, _, err := tr.Evaluate(w, x, y, nil)
	fmt.Printf("accuracy %.3f %v\n", acc, err)
	// Output:
	// tensors: [{w [2 4]} {b [2]}]
	// trained: [1.05 1.05] 7 <nil>
	// accuracy 1.000 <nil>
}
