package cnmon

import "context"

// Health is the Health State section of a card's cnmon info:
//
//	Health State                   :
//	    Device                     : Good
//	    Driver                     : Running
//
// "Good" and "Running" are what the parsers and fixtures of cnmon info
// listed in the package documentation show of working cards. No public
// capture of a faulty card's section exists, so what cnmon prints then is
// not known: every Device state but Good, and every Driver state but
// Running, counts as unhealthy.
type Health struct {
	// Reported is false where cnmon info prints no Health State section
	// (a cnmon that does not report it): the card's health is unknown.
	Reported       bool
	Device, Driver string
}

// Healthy reports whether the card may take work: a card whose cnmon
// reports no health is taken as healthy, since nothing says otherwise.
func (h Health) Healthy() bool {
	return !h.Reported || (h.Device == "Good" && h.Driver == "Running")
}

// Health returns the Health State section of the record.
func (i Info) Health() Health {
	dev, okDev := i.Fields["Health State/Device"]
	drv, okDrv := i.Fields["Health State/Driver"]
	if !okDev && !okDrv {
		return Health{}
	}
	return Health{Reported: true, Device: dev, Driver: drv}
}

// Health runs cnmon info -c card and returns its health.
func (c *Client) Health(ctx context.Context, card int) (Health, error) {
	info, err := c.Info(ctx, card)
	if err != nil {
		return Health{}, err
	}
	return info.Health(), nil
}
