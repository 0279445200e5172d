package jobpreempt

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// Nomination is a preemption in flight for one gang: the room it made,
// its victims, and how their evictions stand. Once recorded (Begin) it is
// guarded by the Preemptor's lock.
type Nomination struct {
	victims map[types.UID]types.NamespacedName
	// victimNodes are the nodes the victims ran on.
	victimNodes map[types.UID]string
	// claims are the victims' allocated claims: the room is not free
	// until they are deallocated.
	claims map[types.NamespacedName]bool
	// nodes are the gang's planned members per node; nil once the room
	// is given back.
	nodes    map[string]int
	priority int32
	at       time.Time
	// freed: the victims were seen gone and their claims released, and
	// the gang was sent to try again on that room.
	freed bool
	// spent: the victims are gone but the gang still did not fit, or
	// some could not be evicted; why says which.
	spent bool
	why   string
	// evictions are the API deletes of the victims this scheduler made.
	evictions map[types.UID]*eviction
	// restored: read back from the API after a start, not made here. Its
	// victims are those found terminating, which may not be all the
	// room needs (a scheduler that stops between its deletes): if the
	// room cannot be used, the gang plans its preemption again at once
	// instead of backing off.
	restored bool
}

// NewNomination returns the nomination of a gang of priority prio for
// its planned members per node.
func NewNomination(prio int32, nodes map[string]int) *Nomination {
	n := &Nomination{victims: map[types.UID]types.NamespacedName{}, victimNodes: map[types.UID]string{},
		claims: map[types.NamespacedName]bool{}, nodes: map[string]int{}, priority: prio, at: time.Now(),
		evictions: map[types.UID]*eviction{}}
	maps.Copy(n.nodes, nodes)
	return n
}

// AddVictim records a pod evicted (or rejected in Permit) for a
// nomination not recorded yet, and its allocated claims, whose devices
// are not free until they are deallocated.
func (j *Preemptor) AddVictim(nom *Nomination, v *corev1.Pod) {
	nom.victims[v.UID] = types.NamespacedName{Namespace: v.Namespace, Name: v.Name}
	nom.victimNodes[v.UID] = v.Spec.NodeName
	for _, c := range j.claimsOf(v) {
		if c.Status.Allocation != nil {
			nom.claims[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = true
		}
	}
}

// reservesAgainst reports whether the nomination's room is kept from
// other pods of priority prio: those of the same or lower priority, while
// the nomination lives. Equal priority counts, as kube-scheduler counts
// nominated pods of equal priority against a pod: otherwise two gangs of
// one priority that preempt at the same time evict for the same room,
// and the one that loses the race waits out NominationTTL.
func (n *Nomination) reservesAgainst(prio int32) bool {
	return n.priority >= prio && time.Since(n.at) <= NominationTTL
}

// nominations are the preemptions in flight, by gang.
type nominations struct {
	mu     sync.Mutex
	byGang map[string]*Nomination
	// rebuild restores the nominations once after a start, at the first
	// scheduling cycle that reads them (so a standby that does not lead
	// yet restores nothing); rebuilt is set once it has.
	rebuild sync.Once
	rebuilt atomic.Bool
}

func (n *nominations) init() { n.byGang = map[string]*Nomination{} }

func (j *Preemptor) set(gang string, nom *Nomination) {
	j.mu.Lock()
	j.byGang[gang] = nom
	j.mu.Unlock()
}

func (j *Preemptor) get(gang string) *Nomination {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.byGang[gang]
}

// Set records a gang's nomination without starting anything (tests and
// restores).
func (j *Preemptor) Set(gang string, nom *Nomination) { j.set(gang, nom) }

// Nominated reports whether a gang holds a nomination.
func (j *Preemptor) Nominated(gang string) bool { return j.get(gang) != nil }

// Clear drops a gang's nomination: it was placed, or is gone.
func (j *Preemptor) Clear(gang string) {
	j.mu.Lock()
	delete(j.byGang, gang)
	j.mu.Unlock()
}

// Gangs lists the gangs that hold a nomination, in order.
func (j *Preemptor) Gangs() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Sorted(maps.Keys(j.byGang))
}

// Any reports whether any gang holds a nomination (whose room Filter
// then keeps other pods off).
func (j *Preemptor) Any() bool {
	j.rebuildNominations()
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.byGang) > 0
}

// ReservedNodes lists the nodes whose freed room is nominated to gangs
// other than gang and reserved against priority prio: a plan must not
// count it.
func (j *Preemptor) ReservedNodes(prio int32, gang string) sets.Set[string] {
	j.rebuildNominations()
	j.mu.Lock()
	defer j.mu.Unlock()
	out := sets.New[string]()
	for key, nom := range j.byGang {
		if key == gang || !nom.reservesAgainst(prio) {
			continue
		}
		for n, c := range nom.nodes {
			if c > 0 {
				out.Insert(n)
			}
		}
	}
	return out
}

// ReservedFor tells whether a node holds room nominated to a gang other
// than gang and reserved against priority prio, and which gang.
func (j *Preemptor) ReservedFor(node string, prio int32, gang string) string {
	j.rebuildNominations()
	j.mu.Lock()
	defer j.mu.Unlock()
	for key, nom := range j.byGang {
		if key == gang || !nom.reservesAgainst(prio) {
			continue
		}
		if nom.nodes[node] > 0 {
			return key
		}
	}
	return ""
}

// rebuildNominations restores, once, the preemptions in flight when the
// scheduler (re)started: a gang preempted if some pod carries a
// DisruptionTarget condition naming it (marked for eviction, deleted or
// not yet); its room is read from its pending members'
// status.nominatedNodeName, its victims are the terminating pods among
// those. A nominated node alone proves nothing: kube-scheduler also
// writes it for members it holds in Permit. Victims that start
// terminating later come in through ObservePod.
func (j *Preemptor) rebuildNominations() {
	j.rebuild.Do(func() {
		defer j.rebuilt.Store(true)
		pods, err := j.pods.List(labels.Everything())
		if err != nil {
			return
		}
		preempted := sets.New[string]()
		for _, pod := range pods {
			if gang := j.victimOf(pod); gang != "" {
				preempted.Insert(gang)
			}
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, pod := range pods {
			if key := j.host.GangOf(pod); preempted.Has(key) && pod.Spec.NodeName == "" && pod.Status.NominatedNodeName != "" {
				nom := j.byGang[key]
				if nom == nil {
					nom = NewNomination(corev1helpers.PodPriority(pod), nil)
					nom.restored = true
					j.byGang[key] = nom
				}
				nom.nodes[pod.Status.NominatedNodeName]++
			}
		}
		for _, pod := range pods {
			j.restoreVictim(pod)
		}
	})
}

// ObservePod reads a pod the informer reports: a victim of an earlier
// scheduler (or of this one before a restart) that starts terminating
// after the nominations were restored joins its gang's nomination, so
// that the gang waits for it rather than judging the room without it.
// Nothing is restored before the first scheduling cycle reads the
// nominations.
func (j *Preemptor) ObservePod(pod *corev1.Pod) {
	if pod.DeletionTimestamp == nil || !j.rebuilt.Load() {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.restoreVictim(pod)
}

// restoreVictim adds a terminating pod that names a gang in its
// DisruptionTarget condition to the gang's nomination, unless it is
// there already or the room was given back. A gang with pending members
// and no nomination gets a restored one: its members' nominated nodes
// may not have been written before the scheduler that evicted for it
// stopped. j.mu is held.
func (j *Preemptor) restoreVictim(pod *corev1.Pod) {
	if pod.DeletionTimestamp == nil {
		return
	}
	gang := j.victimOf(pod)
	if gang == "" {
		return
	}
	nom := j.byGang[gang]
	if nom == nil {
		var prio *int32
		for _, m := range j.host.Members(gang) {
			if m.Spec.NodeName == "" && m.DeletionTimestamp == nil {
				p := corev1helpers.PodPriority(m)
				prio = &p
				break
			}
		}
		if prio == nil {
			return // nobody left to make room for
		}
		nom = NewNomination(*prio, nil)
		nom.restored = true
		j.byGang[gang] = nom
	}
	if _, known := nom.victims[pod.UID]; known || nom.spent {
		return
	}
	j.AddVictim(nom, pod)
}

// victimOf names the gang a pod was evicted for, from its
// DisruptionTarget condition; "" if none.
func (j *Preemptor) victimOf(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.DisruptionTarget || c.Reason != corev1.PodReasonPreemptionByScheduler {
			continue
		}
		if gang, ok := strings.CutPrefix(c.Message, j.evictedFor("")); ok {
			return gang
		}
	}
	return ""
}

// evictedFor is the message of a victim's DisruptionTarget condition.
func (j *Preemptor) evictedFor(gang string) string {
	return j.plugin + ": preempted to make room for gang " + gang
}
