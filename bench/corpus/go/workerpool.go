// Package workerpool runs jobs on a fixed number of goroutines with
// per-job retries, exponential backoff and cancellation through a context.
package workerpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Job is a unit of work. Returning an error wrapped with Permanent stops
// retries immediately; any other error is retried up to MaxAttempts.
type Job struct {
	ID   string
	Run  func(ctx context.Context) (any, error)
	Tags []string
}

// Result reports how a job finished.
type Result struct {
	JobID    string
	Value    any
	Err      error
	Attempts int
	Elapsed  time.Duration
}

// Options configures a Pool. Zero values are replaced by defaults.
type Options struct {
	Workers     int
	MaxAttempts int
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	QueueSize   int
}

// ErrPoolClosed is returned by Submit after Close has been called.
var ErrPoolClosed = errors.New("workerpool: pool is closed")

type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent marks err as not worth retrying.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// Pool is a fixed set of workers consuming a job queue.
type Pool struct {
	opts    Options
	jobs    chan Job
	results chan Result
	wg      sync.WaitGroup
	mu      sync.Mutex
	closed  bool
	stats   Stats
}

// Stats counts outcomes across the life of the pool.
type Stats struct {
	Succeeded int
	Failed    int
	Retries   int
}

// New starts a pool. Results must be drained from Results() or the workers block.
func New(ctx context.Context, opts Options) *Pool {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 3
	}
	if opts.BaseBackoff <= 0 {
		opts.BaseBackoff = 50 * time.Millisecond
	}
	if opts.MaxBackoff < opts.BaseBackoff {
		opts.MaxBackoff = 2 * time.Second
	}
	if opts.QueueSize < 0 {
		opts.QueueSize = 0
	}
	p := &Pool{
		opts:    opts,
		jobs:    make(chan Job, opts.QueueSize),
		results: make(chan Result, opts.QueueSize),
	}
	for i := 0; i < opts.Workers; i++ {
		p.wg.Add(1)
		go p.worker(ctx)
	}
	go func() {
		p.wg.Wait()
		close(p.results)
	}()
	return p
}

// Submit queues a job, blocking while the queue is full. It must not be
// called concurrently with Close.
func (p *Pool) Submit(ctx context.Context, job Job) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return ErrPoolClosed
	}
	if job.Run == nil {
		return fmt.Errorf("workerpool: job %q has no Run function", job.ID)
	}
	select {
	case p.jobs <- job:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting jobs; workers exit once the queue is empty.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.jobs)
	}
}

// Results is closed after every worker has exited.
func (p *Pool) Results() <-chan Result { return p.results }

// Stats returns a snapshot of the counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *Pool) worker(ctx context.Context) {
	defer p.wg.Done()
	for job := range p.jobs {
		result := p.runWithRetry(ctx, job)
		p.mu.Lock()
		if result.Err != nil {
			p.stats.Failed++
		} else {
			p.stats.Succeeded++
		}
		p.stats.Retries += result.Attempts - 1
		p.mu.Unlock()
		select {
		case p.results <- result:
		case <-ctx.Done():
			return
		}
	}
}

func (p *Pool) runWithRetry(ctx context.Context, job Job) Result {
	start := time.Now()
	result := Result{JobID: job.ID}
	backoff := p.opts.BaseBackoff
	for attempt := 1; attempt <= p.opts.MaxAttempts; attempt++ {
		result.Attempts = attempt
		value, err := safeRun(ctx, job)
		if err == nil {
			result.Value = value
			result.Err = nil
			break
		}
		result.Err = fmt.Errorf("job %s attempt %d: %w", job.ID, attempt, err)
		var perm permanentError
		if errors.As(err, &perm) || attempt == p.opts.MaxAttempts {
			break
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			result.Err = ctx.Err()
			result.Elapsed = time.Since(start)
			return result
		case <-timer.C:
		}
		backoff *= 2
		if backoff > p.opts.MaxBackoff {
			backoff = p.opts.MaxBackoff
		}
	}
	result.Elapsed = time.Since(start)
	return result
}

// safeRun converts a panic inside a job into an ordinary error.
func safeRun(ctx context.Context, job Job) (value any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Permanent(fmt.Errorf("panic: %v", r))
		}
	}()
	return job.Run(ctx)
}

// RunAll is a convenience helper: it runs every job and collects the results
// keyed by job ID.
func RunAll(ctx context.Context, opts Options, jobs []Job) (map[string]Result, error) {
	pool := New(ctx, opts)
	go func() {
		defer pool.Close()
		for _, job := range jobs {
			if err := pool.Submit(ctx, job); err != nil {
				return
			}
		}
	}()
	out := make(map[string]Result, len(jobs))
	for result := range pool.Results() {
		out[result.JobID] = result
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	return out, nil
}
